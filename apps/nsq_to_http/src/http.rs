//! The HTTP side of nsq_to_http: one GET or POST per message with
//! `nsq_http`'s client (NSQ's transport settings, redirects, `https://`,
//! Go-worded errors), carrying `User-Agent: nsq_to_http v1.3.0`, the
//! `--content-type` on POST, then each `--header` (a later one of the same
//! name wins).

use bytes::Bytes;
use hyper::Method;
use std::time::Duration;

pub use nsq_http::url::query_escape;

pub const USER_AGENT_VALUE: &str = "nsq_to_http v1.3.0";

pub struct HttpClient {
    client: nsq_http::Client,
    content_type: String,
    /// `--header` values, in order (a later one with the same name wins).
    headers: Vec<(String, String)>,
}

impl HttpClient {
    pub fn new(
        connect_timeout: Duration,
        request_timeout: Duration,
        content_type: String,
        headers: Vec<(String, String)>,
    ) -> HttpClient {
        HttpClient {
            client: nsq_http::Client::new(
                nsq_http::ClientOptions::new(connect_timeout, request_timeout)
                    .user_agent(USER_AGENT_VALUE),
            ),
            content_type,
            headers,
        }
    }

    /// GET `url`; the status of the final answer.
    pub async fn get(&self, url: &str) -> Result<u16, String> {
        self.send(Method::GET, url, None).await
    }

    /// POST `body` to `url`; the status of the final answer.
    pub async fn post(&self, url: &str, body: Bytes) -> Result<u16, String> {
        self.send(Method::POST, url, Some(body)).await
    }

    async fn send(&self, method: Method, url: &str, body: Option<Bytes>) -> Result<u16, String> {
        let mut headers: Vec<(&str, &str)> = Vec::new();
        if body.is_some() {
            headers.push(("Content-Type", &self.content_type));
        }
        headers.extend(self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        self.client
            .request(method, url, &headers, body)
            .await
            .map(|r| r.status.as_u16())
            .map_err(|e| e.to_string())
    }
}

/// Go's `fmt.Sprintf(template, arg)` with one string argument, which is
/// how `--get` templates are filled: `%s`/`%v` take the argument (with
/// width, precision and `-` honoured), `%%` is a percent sign, `%q`/`%x`/`%X`
/// format it, and Go's `%!verb(MISSING)` / `%!(EXTRA ...)` / `%!verb(string=...)`
/// markers appear where Go would put them.
pub fn sprintf_one(template: &str, arg: &str) -> String {
    let mut out = String::new();
    let mut used = false;
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut minus = false;
        while let Some(&f) = chars.peek() {
            if "+-# 0".contains(f) {
                minus |= f == '-';
                chars.next();
            } else {
                break;
            }
        }
        let mut width = String::new();
        while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(d);
            chars.next();
        }
        let mut precision: Option<usize> = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut p = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                p.push(d);
                chars.next();
            }
            precision = Some(p.parse().unwrap_or(0));
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        if used {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        }
        used = true;
        let text = match verb {
            's' | 'v' => match precision {
                Some(p) => arg.chars().take(p).collect(),
                None => arg.to_string(),
            },
            'q' => nsq_protocol::gofmt::quote(arg),
            'x' => arg.bytes().map(|b| format!("{b:02x}")).collect(),
            'X' => arg.bytes().map(|b| format!("{b:02X}")).collect(),
            other => {
                out.push_str(&format!("%!{other}(string={arg})"));
                continue;
            }
        };
        let w: usize = width.parse().unwrap_or(0);
        let pad = w.saturating_sub(text.chars().count());
        if minus {
            out.push_str(&text);
            out.push_str(&" ".repeat(pad));
        } else {
            out.push_str(&" ".repeat(pad));
            out.push_str(&text);
        }
    }
    if !used {
        out.push_str(&format!("%!(EXTRA string={arg})"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sprintf_like_go() {
        assert_eq!(sprintf_one("http://h/?m=%s", "x+y"), "http://h/?m=x+y");
        assert_eq!(sprintf_one("http://h/%%/?m=%s", "x"), "http://h/%/?m=x");
        assert_eq!(sprintf_one("%s-%s", "x"), "x-%!s(MISSING)");
        assert_eq!(sprintf_one("%%s", "x"), "%s%!(EXTRA string=x)");
        assert_eq!(sprintf_one("[%5s|%-3s]", "ab"), "[   ab|%!s(MISSING)]");
        assert_eq!(sprintf_one("%d", "ab"), "%!d(string=ab)");
    }
}
