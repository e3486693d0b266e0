//! The agent's side over streamable HTTP: every POST body read by the screen
//! ([`super::screen`]) before the SDK's HTTP service sees it. A body the screen cannot give an id
//! to is answered here (400, a JSON-RPC error with a null id); a refusal goes on to the
//! connection as the screen rewrote it, so that it is recorded in the connection's session and
//! answered on its stream like any other request.

use axum::body::Body;
use axum::extract::Request;
use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::SharedRef;
use super::admit::{Caller, LOCAL, NOT_THE_OPENER};
use super::screen::{MAX_MESSAGE, Screened, garbage_answer, screen};

/// The header the streamable HTTP transport names a session with.
pub(crate) const TRANSPORT_SESSION: &str = "mcp-session-id";

/// The error a request for another caller's session (or one this gateway never opened) gets.
fn not_yours() -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32600, "message": NOT_THE_OPENER},
    });
    (
        StatusCode::FORBIDDEN,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

/// Binds each HTTP session to the caller that opened it: the session id an `initialize`'s
/// answer carries is recorded against its caller, and every later request naming a session
/// (a POST, the event stream's GET, a DELETE) must come from that caller. A session id is a
/// handle, not a credential.
pub(crate) async fn bind_sessions(
    State(shared): State<SharedRef>,
    request: Request,
    next: Next,
) -> Response {
    let caller = request
        .extensions()
        .get::<Caller>()
        .map_or(LOCAL, |c| c.name.as_str())
        .to_owned();
    let named = request
        .headers()
        .get(TRANSPORT_SESSION)
        .map(|v| v.to_str().map(str::to_owned));
    let named = match named {
        Some(Ok(id)) => {
            let owners = shared.owners.lock().unwrap_or_else(|p| p.into_inner());
            match owners.get(&id) {
                Some(owner) if *owner == caller => {}
                Some(_) => return not_yours(),
                // Never opened here (or forgotten): as the transport answers a session it does
                // not have, so a client opens a new one.
                None => {
                    return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
                }
            }
            Some(id)
        }
        Some(Err(_)) => return not_yours(),
        None => None,
    };
    let closing = request.method() == Method::DELETE;
    let response = next.run(request).await;
    let mut owners = shared.owners.lock().unwrap_or_else(|p| p.into_inner());
    match named {
        None => {
            if let Some(id) = response
                .headers()
                .get(TRANSPORT_SESSION)
                .and_then(|v| v.to_str().ok())
            {
                owners.insert(id.to_owned(), caller);
            }
        }
        Some(id) if closing && response.status().is_success() => {
            owners.remove(&id);
        }
        Some(_) => {}
    }
    drop(owners);
    response
}

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

/// MCP 2026-07-28's header naming a request's method (`Mcp-Method`), as the SDK checks it.
const MCP_METHOD: &str = "mcp-method";
/// MCP 2026-07-28's header naming a request's tool, prompt or resource (`Mcp-Name`).
const MCP_NAME: &str = "mcp-name";
/// The start of MCP 2026-07-28's headers that repeat a call's arguments (`Mcp-Param-*`).
const MCP_PARAM: &str = "mcp-param-";

/// The headers of a request the screen rewrote as a refusal: MCP 2026-07-28's `Mcp-Method`
/// (when given) names the refusal, and its `Mcp-Name` and `Mcp-Param-*` go, so that the SDK,
/// which holds those headers to the body, reads the refusal and answers it in the session.
fn name_the_refusal(headers: &mut axum::http::HeaderMap) {
    let stale: Vec<axum::http::HeaderName> = headers
        .keys()
        .filter(|k| {
            let k = k.as_str();
            k == MCP_NAME || k.starts_with(MCP_PARAM)
        })
        .cloned()
        .collect();
    for name in stale {
        headers.remove(name);
    }
    if headers.contains_key(MCP_METHOD) {
        headers.insert(
            MCP_METHOD,
            axum::http::HeaderValue::from_static(super::screen::REFUSED),
        );
    }
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
                    name_the_refusal(&mut parts.headers);
                    rewritten.into()
                }
                Err(e) => return bad_request(garbage_answer(&e.to_string())),
            },
            Err(answer) => return bad_request(answer),
        },
    };
    next.run(Request::from_parts(parts, Body::from(body))).await
}
