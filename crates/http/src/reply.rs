//! NSQ's response conventions (`http_api.Decorate` with `V1` or
//! `PlainText`): the shapes every daemon answers in, the content types, and
//! the `X-NSQ-Content-Type` header of NSQ's V1 answers. The server writes
//! its own answers (404, 405, redirects, the guard's refusals) with them, as
//! the daemons' handlers do. Never: routing or sockets ([`crate::server`]).

use axum::body::Body;
use axum::response::Response;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::StatusCode;
use serde::Serialize;

pub const JSON: &str = "application/json; charset=utf-8";
pub const TEXT: &str = "text/plain; charset=utf-8";
pub const HTML: &str = "text/html; charset=utf-8";
const NSQ_CONTENT_TYPE: &str = "x-nsq-content-type";
const NSQ_V1: &str = "nsq; version=1.0";

/// A body with a `Content-Type` (none when `content_type` is empty),
/// outside NSQ's V1 convention (`/ping`, static files, redirects).
pub fn plain(status: StatusCode, content_type: &str, body: impl Into<Body>) -> Response {
    let mut r = Response::new(body.into());
    *r.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        if !content_type.is_empty() {
            r.headers_mut().insert(CONTENT_TYPE, v);
        }
    }
    r
}

fn v1(mut r: Response) -> Response {
    r.headers_mut()
        .insert(NSQ_CONTENT_TYPE, HeaderValue::from_static(NSQ_V1));
    r
}

/// A V1 JSON answer (already encoded).
pub fn v1_json_bytes(status: StatusCode, body: Vec<u8>) -> Response {
    v1(plain(status, JSON, body))
}

/// A V1 JSON answer, encoded as Go encodes it.
pub fn v1_json<T: Serialize + ?Sized>(value: &T) -> Response {
    v1_json_bytes(StatusCode::OK, nsq_protocol::gofmt::to_json(value))
}

/// A V1 string result (possibly empty, then without `Content-Type`).
pub fn v1_text(body: impl Into<String>) -> Response {
    let body = body.into();
    let ct = if body.is_empty() { "" } else { TEXT };
    v1(plain(StatusCode::OK, ct, body))
}

/// A V1 error: `{"message":"<text>"}`.
pub fn v1_error(status: StatusCode, message: &str) -> Response {
    #[derive(Serialize)]
    struct Message<'a> {
        message: &'a str,
    }
    v1_json_bytes(status, nsq_protocol::gofmt::to_json(&Message { message }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_headers() {
        let r = v1_text("");
        assert_eq!(r.headers()["x-nsq-content-type"], "nsq; version=1.0");
        assert!(r.headers().get(CONTENT_TYPE).is_none());
        let r = plain(StatusCode::OK, TEXT, "OK");
        assert!(r.headers().get("x-nsq-content-type").is_none());
        let r = v1_error(StatusCode::NOT_FOUND, "NOT_FOUND");
        assert_eq!(r.status(), 404);
        assert_eq!(r.headers()[CONTENT_TYPE], JSON);
    }
}
