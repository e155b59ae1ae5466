//! The per-connection [`Session`] of nsqlookupd's "V1" TCP protocol: what
//! each command, once decoded by [`nsq_protocol::lookupd`], does to the
//! [`RegistrationDb`], and what goes back.
//!
//! Owns: the connection's state (who it is, whether it identified) and the
//! order of nsqlookupd's checks. Never: sockets, tasks or the clock — the
//! connection shell in `tcp/mod.rs` reads lines and bodies, passes `now`, and
//! writes what this module returns; the wire itself (words, bodies, error
//! bytes) is `nsq_protocol::lookupd`.

use std::time::Instant;

use nsq_protocol::lookupd::{decode_identify, topic_channel, V1Error, OK};
use tracing::{info, warn};

use crate::registration::{PeerId, Registration, RegistrationDb};

/// One connection's protocol state: who it is and whether it identified.
#[derive(Debug)]
pub struct Session {
    remote_addr: String,
    peer: Option<PeerId>,
}

impl Session {
    /// `remote_addr` is the connection's `ip:port`, which becomes the peer id.
    pub fn new(remote_addr: String) -> Self {
        Self {
            remote_addr,
            peer: None,
        }
    }

    pub fn remote_addr(&self) -> &str {
        &self.remote_addr
    }

    /// PING: refreshes the peer's last-seen time if it has identified.
    pub fn ping(&self, db: &mut RegistrationDb, now: Instant) -> &'static [u8] {
        if let Some(id) = &self.peer {
            if let Some(since) = db.ping(id, now) {
                info!(client = %id, last_ping_ms = since.as_millis() as u64, "CLIENT: pinged");
            }
        }
        OK
    }

    /// Checked before the IDENTIFY body is read (NSQ refuses a second
    /// IDENTIFY without reading its body).
    pub fn check_identify(&self) -> Result<(), V1Error> {
        match self.peer {
            Some(_) => Err(V1Error::IdentifyAgain),
            None => Ok(()),
        }
    }

    /// IDENTIFY with its body: registers the peer as a `client`. On success the
    /// caller sends `response` (the server's fixed IDENTIFY answer).
    pub fn identify(
        &mut self,
        body: &[u8],
        db: &mut RegistrationDb,
        now: Instant,
    ) -> Result<(), V1Error> {
        self.check_identify()?;
        let info = decode_identify(body, &self.remote_addr)?;
        info!(
            client = %self.remote_addr,
            address = %info.broadcast_address,
            tcp = info.tcp_port,
            http = info.http_port,
            version = %info.version,
            "CLIENT: IDENTIFY"
        );
        let id = info.remote_address.clone();
        if db.identify(info, now) {
            info!(client = %id, registration = %Registration::client(), "DB: REGISTER");
        }
        self.peer = Some(id);
        Ok(())
    }

    /// REGISTER `topic [channel]`; `params` are the words after the command.
    pub fn register(
        &self,
        params: &[&[u8]],
        db: &mut RegistrationDb,
    ) -> Result<&'static [u8], V1Error> {
        let id = self.peer.as_deref().ok_or(V1Error::MustIdentify)?;
        let (topic, channel) = topic_channel("REGISTER", params)?;
        for r in db.register(id, topic, channel) {
            info!(client = %id, registration = %r, "DB: REGISTER");
        }
        Ok(OK)
    }

    /// UNREGISTER `topic [channel]`; `params` are the words after the command.
    pub fn unregister(
        &self,
        params: &[&[u8]],
        db: &mut RegistrationDb,
    ) -> Result<&'static [u8], V1Error> {
        let id = self.peer.as_deref().ok_or(V1Error::MustIdentify)?;
        let (topic, channel) = topic_channel("UNREGISTER", params)?;
        let changes = db.unregister(id, topic, channel);
        for r in changes.unexpected {
            warn!(client = %id, registration = %r, "unexpected UNREGISTER");
        }
        for r in changes.removed {
            info!(client = %id, registration = %r, "DB: UNREGISTER");
        }
        Ok(OK)
    }

    /// Connection gone: remove the peer from every registration.
    pub fn close(&mut self, db: &mut RegistrationDb) {
        if let Some(id) = self.peer.take() {
            for r in db.remove_peer(&id) {
                info!(client = %id, registration = %r, "DB: UNREGISTER");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const BODY: &[u8] = br#"{"broadcast_address":"h","hostname":"host","tcp_port":4150,"http_port":4151,"version":"1.3.0"}"#;

    fn db() -> RegistrationDb {
        RegistrationDb::new(Duration::from_secs(300), Duration::from_secs(45))
    }

    fn wire(e: V1Error) -> String {
        String::from_utf8(e.wire()).unwrap()
    }

    #[test]
    fn session_flow_and_errors() {
        let now = Instant::now();
        let mut db = db();
        let mut s = Session::new("r:1".into());
        assert_eq!(s.register(&[b"t"], &mut db), Err(V1Error::MustIdentify));
        assert_eq!(
            wire(V1Error::MustIdentify),
            "E_INVALID client must IDENTIFY"
        );
        s.identify(BODY, &mut db, now).unwrap();
        assert_eq!(s.identify(BODY, &mut db, now), Err(V1Error::IdentifyAgain));
        assert_eq!(
            wire(V1Error::IdentifyAgain),
            "E_INVALID cannot IDENTIFY again"
        );
        assert_eq!(
            wire(s.register(&[], &mut db).unwrap_err()),
            "E_INVALID REGISTER insufficient number of params"
        );
        assert_eq!(
            wire(s.unregister(&[], &mut db).unwrap_err()),
            "E_INVALID UNREGISTER insufficient number of params"
        );
        assert_eq!(
            wire(s.register(&[b"bad!"], &mut db).unwrap_err()),
            "E_BAD_TOPIC REGISTER topic name 'bad!' is not valid"
        );
        assert_eq!(
            wire(s.register(&[b""], &mut db).unwrap_err()),
            "E_BAD_TOPIC REGISTER topic name '' is not valid"
        );
        assert_eq!(
            wire(s.register(&[b"t", b"bad!"], &mut db).unwrap_err()),
            "E_BAD_CHANNEL REGISTER channel name 'bad!' is not valid"
        );
        assert_eq!(
            wire(s.unregister(&[b"bad!"], &mut db).unwrap_err()),
            "E_BAD_TOPIC UNREGISTER topic name 'bad!' is not valid"
        );
        // Raw bytes of an invalid name are echoed as is.
        assert_eq!(
            s.register(&[b"\xff"], &mut db).unwrap_err().wire(),
            b"E_BAD_TOPIC REGISTER topic name '\xff' is not valid"
        );
        assert_eq!(s.register(&[b"t", b"", b"c"], &mut db), Ok(OK));
        assert!(
            db.channels("t").is_empty(),
            "empty channel word means no channel"
        );
        assert_eq!(s.register(&[b"t", b"c"], &mut db), Ok(OK));
        assert_eq!(db.channels("t"), ["c"]);
        assert_eq!(s.unregister(&[b"never"], &mut db), Ok(OK));
        assert_eq!(s.ping(&mut db, now), OK);
        s.close(&mut db);
        assert!(db.lookup("t", now).unwrap().producers.is_empty());
        assert!(db.nodes(now).is_empty());
    }
}
