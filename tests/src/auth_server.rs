//! A small auth server for the tests (NSQ's `--auth-http-address`
//! protocol, plain HTTP): a thread answering every request with
//! `respond(secret)`, counting the questions per secret and keeping each
//! request's line.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct AuthServer {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    asked: Arc<Mutex<HashMap<String, usize>>>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl AuthServer {
    /// Serves on a free port until the test process ends.
    pub fn start(respond: impl Fn(&str) -> (u16, String) + Send + 'static) -> AuthServer {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind auth server");
        let addr = l.local_addr().expect("auth server address").to_string();
        let asked = Arc::new(Mutex::new(HashMap::new()));
        let counts = asked.clone();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let kept = lines.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                s.set_read_timeout(Some(Duration::from_secs(5))).ok();
                let mut req = Vec::new();
                let mut chunk = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&req).to_string();
                let secret = secret_of(&head);
                kept.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(head.lines().next().unwrap_or_default().to_string());
                *counts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(secret.clone())
                    .or_insert(0) += 1;
                let (status, body) = respond(&secret);
                let resp = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes());
            }
        });
        AuthServer { addr, asked, lines }
    }

    /// The request line of every question so far (`GET /auth?... HTTP/1.1`).
    pub fn request_lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many times the server was asked about `secret`.
    pub fn asked(&self, secret: &str) -> usize {
        self.asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(secret)
            .copied()
            .unwrap_or(0)
    }
}

/// The `secret` of a GET request's query string (`+` and `%XX` decoded).
fn secret_of(head: &str) -> String {
    let Some(i) = head.find("secret=") else {
        return String::new();
    };
    let raw: String = head[i + 7..]
        .chars()
        .take_while(|c| *c != '&' && *c != ' ')
        .collect();
    let bytes = raw.replace('+', " ").into_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&String::from_utf8_lossy(&bytes[i + 1..i + 3]), 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An auth server answer granting `authorizations` (JSON list) for an hour.
pub fn grant(identity: &str, authorizations: &str) -> String {
    format!(
        r#"{{"ttl":3600,"identity":"{identity}","identity_url":"","authorizations":{authorizations}}}"#
    )
}
