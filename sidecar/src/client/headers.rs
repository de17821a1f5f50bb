//! Which headers cross the proxy: a client's request headers as they go on to a replica, and
//! the hop-by-hop headers that describe one connection and are dropped both ways.

use http::header::{self, HeaderMap, HeaderName};

/// The headers of a client's request that go on to the replica.
pub(super) fn pass_on(mut headers: HeaderMap) -> HeaderMap {
    headers.remove(header::HOST);
    headers.remove(header::CONTENT_LENGTH);
    strip_hop_by_hop(&mut headers);
    headers
}

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1).
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// Removes hop-by-hop headers (requests going up, responses coming back).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over the few names finds out without hashing any,
    // where a remove per name would hash nine names every time.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let hop: Vec<HeaderName> = headers
        .keys()
        .filter(|n| is_hop_by_hop(n))
        .cloned()
        .collect();
    for name in hop {
        headers.remove(name);
    }
}
