//! JSON-RPC 2.0 framing for `serve`: one message per line, the error codes, and the messages the
//! server writes.

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Longest line the server reads; a longer one is refused and skipped.
pub const MAX_LINE: usize = 1 << 20;

/// Invalid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// Not a request, notification or response.
pub const INVALID_REQUEST: i64 = -32600;
/// No such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Params missing or of the wrong shape.
pub const INVALID_PARAMS: i64 = -32602;
/// The request was valid but could not be carried out (no open turn, a log failure...).
pub const REQUEST_FAILED: i64 = -32000;
/// The session is owned by another connection, or not open on this one.
pub const NOT_OWNER: i64 = -32001;

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    /// The JSON-RPC error code.
    pub code: i64,
    /// What went wrong.
    pub message: String,
}

impl RpcError {
    /// An error with `code`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }

    /// Bad params.
    pub fn params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    /// A request that failed.
    pub fn failed(message: impl std::fmt::Display) -> Self {
        Self::new(REQUEST_FAILED, message.to_string())
    }
}

/// A response line.
pub fn response(id: &Value, result: Result<Value, RpcError>) -> String {
    let body = match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}})
        }
    };
    body.to_string()
}

/// A request line from the server.
pub fn request(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// A notification line from the server.
pub fn notification(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

/// Reads a required string param.
pub fn str_param<'a>(params: &'a Value, name: &str) -> Result<&'a str, RpcError> {
    match params.get(name) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(RpcError::params(format!(
            "{name} must be a string, not {other}"
        ))),
        None => Err(RpcError::params(format!("missing {name}"))),
    }
}

/// The caller's trace from `params._meta.traceparent`, when it sent a valid one. A malformed
/// value is ignored (the question gets a trace of its own), never an error: tracing must not
/// change whether a call is answered.
pub fn trace_parent(params: &Value) -> Option<crate::service::TraceParent> {
    let value = params.get("_meta")?.get("traceparent")?.as_str()?;
    match value.parse() {
        Ok(parent) => Some(parent),
        Err(e) => {
            tracing::debug!(error = %e, "ignored the request's _meta.traceparent");
            None
        }
    }
}

/// Reads an optional string param.
pub fn opt_str_param<'a>(params: &'a Value, name: &str) -> Result<Option<&'a str>, RpcError> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(RpcError::params(format!(
            "{name} must be a string, not {other}"
        ))),
    }
}

/// What [`read_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// A line (without its newline) is in the buffer.
    Text,
    /// A line longer than [`MAX_LINE`] was skipped.
    TooLong,
    /// The input ended.
    End,
}

/// Reads one line into `buf`, never holding more than [`MAX_LINE`] bytes of it: a longer line is
/// skipped to its end and reported, and reading carries on after it.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if too_long {
                Line::TooLong
            } else if buf.is_empty() {
                Line::End
            } else {
                Line::Text
            });
        }
        let (taken, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            let body = &chunk[..if done { taken - 1 } else { taken }];
            if buf.len() + body.len() > MAX_LINE {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(body);
            }
        }
        reader.consume(taken);
        if done {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(if too_long { Line::TooLong } else { Line::Text });
        }
    }
}
