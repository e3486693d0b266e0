//! The guard a loopback listener (the console, the metrics address) puts before its routes: a
//! web page the user opens can reach `127.0.0.1` from the browser, and with a DNS name it
//! rebinds to loopback it can read the answer too (rule ids and store errors from `/metrics`).
//! So a request must name a loopback host in `Host`, and a browser's `Origin`, when sent, must
//! be the same origin; anything else is refused (403) before a route runs.

use axum::extract::Request;
use axum::http::{StatusCode, header, uri::Authority};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// What a request whose `Host` is not a loopback name is told.
pub const HOST_NOT_LOOPBACK: &str =
    "this address answers only requests for a loopback host (localhost, 127.0.0.1, [::1])";

/// What a request whose `Origin` is another origin (or `null`) is told.
pub const CROSS_ORIGIN: &str = "this address answers only requests from its own origin";

/// Refuses a request that does not name a loopback `Host`, or that carries an `Origin` other
/// than the one it was sent to.
pub(super) async fn loopback_only(request: Request, next: Next) -> Response {
    let headers = request.headers();
    let Some(host) = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| is_loopback_authority(h))
    else {
        return (StatusCode::FORBIDDEN, HOST_NOT_LOOPBACK).into_response();
    };
    if let Some(origin) = headers.get(header::ORIGIN) {
        let same = origin
            .to_str()
            .ok()
            .is_some_and(|origin| same_origin(origin, host));
        if !same {
            return (StatusCode::FORBIDDEN, CROSS_ORIGIN).into_response();
        }
    }
    next.run(request).await
}

/// `localhost`, an IPv4 loopback address or `[::1]`, with or without a port.
fn is_loopback_authority(value: &str) -> bool {
    let Ok(authority) = value.parse::<Authority>() else {
        return false;
    };
    // No user-info: `Host` never carries one, and `a@127.0.0.1` only confuses a reader.
    if authority.as_str().contains('@') {
        return false;
    }
    let host = authority.host();
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Whether `origin` (`scheme://host[:port]`) is the origin of a request sent to `host`.
fn same_origin(origin: &str, host: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    rest.eq_ignore_ascii_case(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_by_name_address_and_port() {
        for ok in [
            "localhost",
            "LOCALHOST:9000",
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.1.2.3:1",
            "[::1]",
            "[::1]:9090",
        ] {
            assert!(is_loopback_authority(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.example",
            "evil.example:9000",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "10.0.0.1:80",
            "0.0.0.0:9000",
            "[::]:9000",
            "user@127.0.0.1",
            "127.0.0.1 :80",
            "2130706433",
        ] {
            assert!(!is_loopback_authority(bad), "{bad}");
        }
    }

    #[test]
    fn an_origin_must_be_the_host_it_was_sent_to() {
        assert!(same_origin("http://127.0.0.1:9000", "127.0.0.1:9000"));
        assert!(same_origin("https://localhost:9000", "localhost:9000"));
        for bad in [
            "null",
            "http://evil.example",
            "http://localhost:8080",
            "http://127.0.0.1:9000/",
            "file://",
            "http://127.0.0.1:90000",
        ] {
            assert!(!same_origin(bad, "127.0.0.1:9000"), "{bad}");
        }
    }
}
