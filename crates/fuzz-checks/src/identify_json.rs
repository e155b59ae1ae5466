//! IDENTIFY: `IdentifyRequest::parse` then `negotiate` against nsqd's default
//! `ServerFeatures`, then the response is built and serialised. Never panics;
//! the response round-trips through JSON and the request re-serialises.

use nsq_protocol::identify::{negotiate, IdentifyRequest, IdentifyResponse, ServerFeatures};

pub fn check(data: &[u8]) {
    let Ok(req) = IdentifyRequest::parse(data) else {
        return;
    };
    let srv = ServerFeatures::default();
    if let Ok(n) = negotiate(&req, &srv) {
        let resp = IdentifyResponse::new(&n, &srv);
        let json = serde_json::to_vec(&resp).expect("response serialises");
        let back: IdentifyResponse = serde_json::from_slice(&json).expect("response round-trips");
        assert_eq!(back, resp);
    }
    // Serialising the request must also never fail.
    let _ = serde_json::to_vec(&req).expect("request serialises");
}
