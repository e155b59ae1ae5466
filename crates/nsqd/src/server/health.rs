//! nsqd's health, as `/ping` reports it: OK, or the last disk error. A disk
//! write that fails makes it bad, one that works makes it good again (as
//! nsqd's topic and channel puts do); with `--sync-every=1` a failed sync
//! makes it bad too.

use parking_lot::Mutex;

#[derive(Debug, Default)]
pub struct Health(Mutex<Option<String>>);

impl Health {
    /// A disk error (Some) or a write that worked again (None).
    pub fn set(&self, err: Option<String>) {
        let mut h = self.0.lock();
        if *h != err {
            *h = err;
        }
    }

    /// `OK` or `NOK - <error>`.
    pub fn text(&self) -> String {
        match &*self.0.lock() {
            None => "OK".into(),
            Some(e) => format!("NOK - {e}"),
        }
    }

    pub fn is_ok(&self) -> bool {
        self.0.lock().is_none()
    }
}
