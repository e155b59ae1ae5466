//! The byte stream under one nsqd connection and the layers IDENTIFY can put
//! on it, in go-nsq's order: plain TCP, then TLS (tokio-rustls, ring), then
//! snappy or deflate (`nsq_protocol::compress`).
//!
//! The stream is split into a [`Reader`] and a [`Writer`] so one task can
//! wait for frames while it writes. An upgrade puts the halves back together
//! ([`upgrade_tls`]) or stacks a codec on each ([`Reader::set_decoder`],
//! [`Writer::set_encoder`]); everything above (framing, commands) is the same
//! for every combination.

use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use nsq_protocol::compress::{Decoder, Encoder};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};

pub(crate) use nsq_http::stream::Stream;

use crate::config::Config;
use crate::error::ConnectError;

/// The reading half, decompressing once a codec is on.
pub(crate) struct Reader {
    rd: ReadHalf<Stream>,
    decoder: Option<Decoder>,
    /// Compressed bytes not yet decoded.
    raw: BytesMut,
}

impl Reader {
    /// Appends plain bytes to `out`; `Ok(0)` means end of stream. Cancel-safe:
    /// bytes already read stay in `raw` (or in `out`).
    pub(crate) async fn read_buf(&mut self, out: &mut BytesMut) -> io::Result<usize> {
        let Some(dec) = self.decoder.as_mut() else {
            return self.rd.read_buf(out).await;
        };
        loop {
            if !self.raw.is_empty() {
                let before = out.len();
                dec.decode(&mut self.raw, out)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                if out.len() > before {
                    return Ok(out.len() - before);
                }
            }
            if self.rd.read_buf(&mut self.raw).await? == 0 {
                return Ok(0);
            }
        }
    }

    /// Turns decompression on. `pending` holds bytes already read past the
    /// last plain frame: they were sent through the new layer.
    pub(crate) fn set_decoder(&mut self, dec: Decoder, pending: BytesMut) {
        let mut raw = pending;
        raw.extend_from_slice(&self.raw);
        self.raw = raw;
        self.decoder = Some(dec);
    }
}

/// The writing half, compressing each write once a codec is on (one write =
/// one snappy chunk run or one deflate sync flush, so nsqd can decode it at once).
pub(crate) struct Writer {
    wr: WriteHalf<Stream>,
    encoder: Option<Encoder>,
    scratch: BytesMut,
}

impl Writer {
    pub(crate) async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self.encoder.as_mut() {
            None => self.wr.write_all(bytes).await?,
            Some(enc) => {
                self.scratch.clear();
                enc.encode(bytes, &mut self.scratch)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                self.wr.write_all(&self.scratch).await?;
            }
        }
        // A no-op for TCP; TLS needs it to push its records out.
        self.wr.flush().await
    }

    pub(crate) async fn shutdown(&mut self) -> io::Result<()> {
        self.wr.shutdown().await
    }

    pub(crate) fn set_encoder(&mut self, enc: Encoder) {
        self.encoder = Some(enc);
    }
}

/// Splits a fresh (plain) connection.
pub(crate) fn split(stream: Stream) -> (Reader, Writer) {
    let (rd, wr) = tokio::io::split(stream);
    (
        Reader {
            rd,
            decoder: None,
            raw: BytesMut::new(),
        },
        Writer {
            wr,
            encoder: None,
            scratch: BytesMut::new(),
        },
    )
}

/// Runs the TLS handshake over the (still plain, uncompressed) connection
/// and returns the halves of the TLS stream. `addr` gives the server name
/// unless `tls_server_name` is set.
pub(crate) async fn upgrade_tls(
    rd: Reader,
    wr: Writer,
    addr: &str,
    cfg: &Config,
) -> Result<(Reader, Writer), ConnectError> {
    if rd.decoder.is_some() || wr.encoder.is_some() || !rd.raw.is_empty() {
        return Err(ConnectError::Tls(
            "TLS must be negotiated before compression".into(),
        ));
    }
    let tcp = match rd.rd.unsplit(wr.wr) {
        Stream::Plain(tcp) => tcp,
        Stream::Tls(_) => return Err(ConnectError::Tls("connection is already TLS".into())),
    };
    let connector = tokio_rustls::TlsConnector::from(client_config(cfg)?);
    let name = server_name(addr, cfg)?;
    let tls = match tokio::time::timeout(cfg.read_timeout, connector.connect(name, tcp)).await {
        Err(_) => return Err(ConnectError::Tls("handshake timed out".into())),
        Ok(Err(e)) => return Err(ConnectError::Tls(e.to_string())),
        Ok(Ok(s)) => s,
    };
    Ok(split(Stream::Tls(Box::new(tls.into()))))
}

/// The name the server certificate must carry: `tls_server_name`, else the
/// host of `addr` (an IP address is checked against the certificate's IP SANs).
fn server_name(addr: &str, cfg: &Config) -> Result<ServerName<'static>, ConnectError> {
    let host = match cfg.tls_server_name.as_deref().filter(|s| !s.is_empty()) {
        Some(n) => n.to_string(),
        None => {
            let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr);
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string()
        }
    };
    ServerName::try_from(host.clone())
        .map_err(|e| ConnectError::Tls(format!("bad server name {host:?}: {e}")))
}

/// go-nsq's TLS: `tls_root_ca_file` (else the system's CAs, as Go's),
/// or any certificate with `tls_insecure_skip_verify`.
fn client_config(cfg: &Config) -> Result<Arc<rustls::ClientConfig>, ConnectError> {
    let tls = nsq_http::tls::ClientTls {
        root_ca_file: cfg.tls_root_ca_file.as_deref().unwrap_or(""),
        insecure_skip_verify: cfg.tls_insecure_skip_verify,
        ..Default::default()
    };
    match tls.config().map_err(ConnectError::Tls)? {
        Some(c) => Ok(c),
        None => nsq_http::tls::default_client_config().map_err(ConnectError::Tls),
    }
}
