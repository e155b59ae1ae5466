//! IDENTIFY: the client's settings and features, negotiated within nsqd's
//! bounds, then the upgrades it asked for in nsqd's order — TLS, then
//! snappy or deflate — each followed by an `OK` sent through the new layer.
//!
//! The TLS upgrade takes the socket back from the writer, runs the server
//! handshake (first replaying any bytes the client sent after IDENTIFY that
//! the reader already buffered), and splits the TLS stream again; only this
//! client waits for it.

use std::time::Duration;

use nsq_protocol::compress::{
    Decoder, DeflateDecoder, DeflateEncoder, Encoder, SnappyDecoder, SnappyEncoder,
};
use nsq_protocol::error::E_IDENTIFY_FAILED;
use nsq_protocol::frame::OK;
use nsq_protocol::identify::{negotiate, IdentifyRequest, IdentifyResponse, Negotiated};
use nsq_protocol::ProtocolError;
use tokio::sync::oneshot;

use super::conn::{Conn, Inbound};
use crate::server::outbox::{Control, WriterSettings};
use crate::server::tls::TlsInfo;
use crate::server::transport::{self, Prefixed, Reader};

/// nsqd's deadline for the TLS handshake after IDENTIFY.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

fn failed(e: &dyn std::fmt::Display) -> ProtocolError {
    ProtocolError::fatal(E_IDENTIFY_FAILED, format!("IDENTIFY failed {e}"))
}

pub async fn identify(
    conn: &mut Conn,
    inbound: &mut Inbound,
    body: &[u8],
) -> Result<(), ProtocolError> {
    let req = IdentifyRequest::parse(body)?;
    let n = negotiate(&req, &conn.nsqd.features)?;
    conn.client.update_info(|i| {
        i.client_id = n.client_id.clone();
        i.hostname = n.hostname.clone();
        i.user_agent = n.user_agent.clone();
        i.sample_rate = n.sample_rate;
        i.topology_region = n.topology_region.clone();
        i.topology_zone = n.topology_zone.clone();
    });
    conn.session.identified(&n);
    conn.client.send_control(Control::Settings(WriterSettings {
        heartbeat_ms: n.heartbeat_ms,
        output_buffer_size: n.output_buffer_size.max(1) as usize,
    }));
    if !n.feature_negotiation {
        conn.respond(OK);
        return Ok(());
    }
    let resp = IdentifyResponse::new(&n, &conn.nsqd.features);
    let json = serde_json::to_vec(&resp).map_err(|e| failed(&e))?;
    conn.respond(&json);
    if n.tls_v1 || n.snappy || n.deflate {
        upgrade(conn, inbound, &n).await?;
    }
    Ok(())
}

async fn upgrade(
    conn: &mut Conn,
    inbound: &mut Inbound,
    n: &Negotiated,
) -> Result<(), ProtocolError> {
    // Bytes the client sent right after IDENTIFY already belong to the new
    // layer; they are replayed into it.
    let mut leftover = inbound.buf.split().freeze();
    if n.tls_v1 {
        // A second IDENTIFY cannot wrap TLS in TLS (Go nsqd would try, and
        // fail the handshake); say so instead.
        if conn.session.tls.is_some() || conn.session.compressed {
            return Err(failed(&"connection already upgraded"));
        }
        let Some(cfg) = conn.nsqd.tls.clone() else {
            return Err(failed(&"TLS not configured"));
        };
        tracing::info!(addr = %conn.client.remote_addr, "upgrading connection to TLS");
        let (give_tx, give_rx) = oneshot::channel();
        let (take_tx, take_rx) = oneshot::channel();
        conn.client.send_control(Control::Detach {
            give: give_tx,
            take: take_rx,
        });
        // The writer first flushes the JSON: the client starts its
        // handshake only after reading it.
        let wr = give_rx.await.map_err(|_| failed(&"connection closed"))?;
        let rd = std::mem::replace(&mut inbound.rd, Reader::Detached);
        let tcp = transport::reunite(rd, wr).map_err(|e| failed(&e))?;
        let io = Prefixed::new(std::mem::take(&mut leftover), tcp);
        let accept = tokio_rustls::TlsAcceptor::from(cfg)
            .accept(io)
            .into_fallible();
        let handshake = tokio::select! {
            r = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, accept) => r,
            // nsqd is shutting down: the socket goes with the handshake.
            _ = conn.client.closer.cancelled() => return Err(failed(&"connection closed")),
        };
        match handshake {
            Ok(Ok(tls)) => {
                let info = TlsInfo::of(tls.get_ref().1);
                conn.client.update_info(|ci| {
                    ci.tls = true;
                    ci.tls_cipher_suite = info.cipher_suite.clone();
                    ci.tls_version = info.version.clone();
                    ci.tls_negotiated_protocol = info.negotiated_protocol.clone();
                });
                let (r, w) = transport::split_tls(tls);
                inbound.rd = r;
                let _ = take_tx.send(w);
                conn.session.tls = Some(info.common_name);
                conn.respond(OK);
            }
            Ok(Err((e, io))) => {
                // The error frame goes out in plain text, as from nsqd.
                let (r, w) = transport::split_tcp(io.into_inner());
                inbound.rd = r;
                let _ = take_tx.send(w);
                return Err(failed(&e));
            }
            // The socket went down with the handshake; the writer sees
            // `take` dropped and closes.
            Err(_) => return Err(failed(&"TLS handshake timed out")),
        }
    }
    if n.snappy || n.deflate {
        if conn.session.compressed {
            return Err(failed(&"connection already compressed"));
        }
        let (enc, mut dec) = if n.snappy {
            tracing::info!(addr = %conn.client.remote_addr, "upgrading connection to snappy");
            conn.client.update_info(|i| i.snappy = true);
            (
                Encoder::Snappy(SnappyEncoder::new()),
                Decoder::Snappy(SnappyDecoder::new()),
            )
        } else {
            tracing::info!(addr = %conn.client.remote_addr, level = n.deflate_level, "upgrading connection to deflate");
            conn.client.update_info(|i| i.deflate = true);
            (
                Encoder::Deflate(DeflateEncoder::new(n.deflate_level as u32)),
                Decoder::Deflate(DeflateDecoder::new()),
            )
        };
        conn.session.compressed = true;
        conn.client.send_control(Control::Compress(Box::new(enc)));
        conn.respond(OK);
        inbound.raw.extend_from_slice(&leftover);
        dec.decode(&mut inbound.raw, &mut inbound.buf)
            .map_err(|e| failed(&e))?;
        inbound.decoder = Some(dec);
    }
    Ok(())
}
