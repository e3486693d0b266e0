//! The agent's side over streamable HTTP: every POST body read by the screen
//! ([`super::screen`]) before the SDK's HTTP service sees it. A body the screen cannot give an id
//! to is answered here (400, a JSON-RPC error with a null id); a refusal goes on to the
//! connection as the screen rewrote it, so that it is recorded in the connection's session and
//! answered on its stream like any other request.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::screen::{MAX_MESSAGE, Screened, garbage_answer, screen};

fn bad_request(answer: Vec<u8>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        answer,
    )
        .into_response()
}

/// The middleware: screens a POST's body, passes everything else as it came.
pub(crate) async fn screen_posts(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_MESSAGE).await else {
        return bad_request(garbage_answer(&format!(
            "a body that could not be read or is longer than {MAX_MESSAGE} bytes"
        )));
    };
    let body = match screen(&bytes) {
        // Exactly the bytes the screen read.
        Screened::Pass(_) => bytes,
        refused => match refused.into_message() {
            Ok(message) => match serde_json::to_vec(&message) {
                Ok(rewritten) => {
                    parts.headers.remove(header::CONTENT_LENGTH);
                    rewritten.into()
                }
                Err(e) => return bad_request(garbage_answer(&e.to_string())),
            },
            Err(answer) => return bad_request(answer),
        },
    };
    next.run(Request::from_parts(parts, Body::from(body))).await
}
