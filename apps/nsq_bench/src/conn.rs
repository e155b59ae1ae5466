//! One V2 client connection over plain tokio TCP: magic, frame reading,
//! IDENTIFY and SUB. Everything the server sends is treated as untrusted.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Bytes, BytesMut};
use nsq_protocol::command::{encode_body, encode_line};
use nsq_protocol::frame::{decode_frame, Frame, FrameType, HEARTBEAT, MAGIC_V2, OK};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest frame accepted from nsqd (its own --max-msg-size default is 1 MiB).
pub const MAX_FRAME: usize = 64 << 20;
/// Bytes reserved in the read buffer before every read.
pub const READ_CHUNK: usize = 64 * 1024;

pub const USER_AGENT: &str = concat!("nsq_bench/", env!("CARGO_PKG_VERSION"));

/// Resolves `addr`; unless `allow_remote`, only loopback addresses are accepted.
pub async fn resolve(addr: &str, allow_remote: bool) -> Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .with_context(|| format!("resolving {addr:?}"))?
        .collect();
    let chosen = addrs
        .iter()
        .copied()
        .find(|a| a.ip().is_loopback())
        .or_else(|| addrs.first().copied());
    let a = chosen.ok_or_else(|| anyhow!("{addr:?} resolved to no address"))?;
    if !allow_remote && !a.ip().is_loopback() {
        bail!("refusing to connect to non-loopback address {a} (pass --allow-remote to permit it)");
    }
    Ok(a)
}

/// Reads one complete frame from `rd`, buffering in `buf`; waits at most
/// `timeout` for each read.
pub async fn read_frame_from<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    timeout: Duration,
) -> Result<Frame> {
    loop {
        if let Some(f) =
            decode_frame(buf, MAX_FRAME).map_err(|e| anyhow!("bad frame from nsqd: {e}"))?
        {
            return Ok(f);
        }
        buf.reserve(READ_CHUNK);
        let n = tokio::time::timeout(timeout, rd.read_buf(buf))
            .await
            .map_err(|_| anyhow!("no data from nsqd for {timeout:?}"))?
            .context("reading from nsqd")?;
        if n == 0 {
            bail!("nsqd closed the connection");
        }
    }
}

/// Printable rendering of server-provided bytes (bounded length).
pub fn show(data: &[u8]) -> String {
    let s = String::from_utf8_lossy(&data[..data.len().min(200)]).into_owned();
    if data.len() > 200 {
        format!("{s}...")
    } else {
        s
    }
}

/// A message id as a `&str` usable on a command line: 16 printable,
/// non-space ASCII bytes (nsqd sends lowercase hex).
pub fn id_str(id: &[u8]) -> Result<&str> {
    if id.len() != 16 || !id.iter().all(|b| b.is_ascii_graphic()) {
        bail!(
            "message id from nsqd is not 16 printable ASCII bytes: {:?}",
            show(id)
        );
    }
    std::str::from_utf8(id).map_err(|_| anyhow!("message id is not ASCII"))
}

pub struct Conn {
    pub stream: TcpStream,
    pub rbuf: BytesMut,
    pub wbuf: BytesMut,
    pub io_timeout: Duration,
}

impl Conn {
    /// Connects, sets TCP_NODELAY (as Go does by default) and sends the V2 magic.
    pub async fn connect(addr: SocketAddr, io_timeout: Duration) -> Result<Conn> {
        let stream = tokio::time::timeout(io_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| anyhow!("connecting to {addr}: timed out after {io_timeout:?}"))?
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        let mut c = Conn {
            stream,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            wbuf: BytesMut::with_capacity(READ_CHUNK),
            io_timeout,
        };
        c.wbuf.extend_from_slice(MAGIC_V2);
        c.flush().await?;
        Ok(c)
    }

    /// Writes out `wbuf` (bounded by the io timeout).
    pub async fn flush(&mut self) -> Result<()> {
        if !self.wbuf.is_empty() {
            tokio::time::timeout(self.io_timeout, self.stream.write_all(&self.wbuf))
                .await
                .map_err(|_| anyhow!("writing to nsqd: timed out after {:?}", self.io_timeout))?
                .context("writing to nsqd")?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// After a failed write: the error frame nsqd may have sent before
    /// closing (best effort, bounded by 500 ms).
    pub async fn pending_error(&mut self) -> Option<String> {
        let look = async {
            loop {
                match read_frame_from(&mut self.stream, &mut self.rbuf, Duration::from_millis(500))
                    .await
                {
                    Ok(f) if f.frame_type == FrameType::Error => return Some(show(&f.data)),
                    Ok(_) => continue,
                    Err(_) => return None,
                }
            }
        };
        tokio::time::timeout(Duration::from_millis(500), look)
            .await
            .ok()
            .flatten()
    }

    pub async fn read_frame(&mut self) -> Result<Frame> {
        read_frame_from(&mut self.stream, &mut self.rbuf, self.io_timeout).await
    }

    /// Reads until a response frame other than a heartbeat (answered with
    /// NOP); an error frame or a message frame is an error.
    pub async fn read_response(&mut self, what: &str) -> Result<Bytes> {
        loop {
            let f = self.read_frame().await?;
            match f.frame_type {
                FrameType::Response if f.data == HEARTBEAT => {
                    encode_line(&mut self.wbuf, "NOP", &[]);
                    self.flush().await?;
                }
                FrameType::Response => return Ok(f.data),
                FrameType::Error => bail!("{what}: nsqd answered {}", show(&f.data)),
                FrameType::Message => bail!("{what}: unexpected message frame"),
            }
        }
    }

    /// IDENTIFY with feature_negotiation and default settings. Returns the
    /// negotiated JSON (None if the server answered a bare OK).
    pub async fn identify(&mut self, client_id: &str) -> Result<Option<Value>> {
        let body = serde_json::json!({
            "client_id": client_id,
            "hostname": "nsq_bench",
            "user_agent": USER_AGENT,
            "feature_negotiation": true,
        });
        encode_line(&mut self.wbuf, "IDENTIFY", &[]);
        encode_body(&mut self.wbuf, &serde_json::to_vec(&body)?);
        self.flush().await?;
        let data = self.read_response("IDENTIFY").await?;
        if &data[..] == OK {
            return Ok(None);
        }
        let v: Value = serde_json::from_slice(&data).with_context(|| {
            format!(
                "IDENTIFY response is neither OK nor JSON: {:?}",
                show(&data)
            )
        })?;
        for k in ["tls_v1", "snappy", "deflate"] {
            if v.get(k).and_then(Value::as_bool) == Some(true) {
                bail!("nsqd negotiated {k} although nsq_bench did not ask for it");
            }
        }
        Ok(Some(v))
    }

    pub async fn subscribe(&mut self, topic: &str, channel: &str) -> Result<()> {
        encode_line(&mut self.wbuf, "SUB", &[topic, channel]);
        self.flush().await?;
        let data = self.read_response("SUB").await?;
        if &data[..] != OK {
            bail!("SUB: expected OK, got {:?}", show(&data));
        }
        Ok(())
    }
}
