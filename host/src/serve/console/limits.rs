//! The console's share of `[limits]`: a request's body is read whole, within a size and a time,
//! before any handler sees it; a login holds a bounded number of event streams. (The head's
//! timeout is the HTTP server's own, set where connections are accepted.)

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Console;

/// The text of a body larger than `console_body_bytes`.
pub const BODY_TOO_LARGE: &str = "The request is larger than the console accepts.";

/// The text of a body that did not arrive within `console_body_timeout_s`.
pub const BODY_TOO_SLOW: &str = "The request's body did not arrive in time.";

/// The text of an event stream over the login's share.
pub const TOO_MANY_STREAMS: &str =
    "Too many live pages are open for this login: close one, or reload it later.";

/// Reads the body whole within the limits, then hands the request on.
pub async fn whole_body(
    State(console): State<Arc<Console>>,
    request: Request,
    next: Next,
) -> Response {
    let limits = console.server.inner.admission.limits();
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout(
        limits.console_body_timeout,
        axum::body::to_bytes(body, limits.console_body_bytes),
    )
    .await;
    match read {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(_)) => (StatusCode::PAYLOAD_TOO_LARGE, BODY_TOO_LARGE).into_response(),
        Err(_) => (StatusCode::REQUEST_TIMEOUT, BODY_TOO_SLOW).into_response(),
    }
}

/// One of a login's event streams; dropping it frees the place.
pub struct StreamSlot(Arc<AtomicUsize>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A place for one more event stream among `open`, or `None` past `most`.
pub fn stream_slot(open: &Arc<AtomicUsize>, most: usize) -> Option<StreamSlot> {
    open.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
        (n < most).then_some(n + 1)
    })
    .ok()
    .map(|_| StreamSlot(open.clone()))
}
