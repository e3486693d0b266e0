//! One client connection: lines in and out, authentication in `initialize`, the calls of a
//! connection queued in order, what it owns (sessions, prompts, requests in flight), and what
//! happens when it goes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Server, auth, rpc};
use crate::agent::Agent;
use crate::config::token::TokenRole;
use crate::waterfall::Registration;
use rpc::{RpcError, str_param};

impl Server {
    /// Serves one client on a reader and writer of JSON lines, as a local client (stdio) that
    /// needs no token.
    pub async fn connection<R, W>(&self, reader: R, writer: W)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        self.connection_as(reader, writer, "stdio".to_owned(), false)
            .await;
    }

    /// Serves one client from `peer`, which must first authenticate when `authenticate`.
    pub(super) async fn connection_as<R, W>(
        &self,
        reader: R,
        mut writer: W,
        peer: String,
        authenticate: bool,
    ) where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let conn = Arc::new(Conn {
            id: self.inner.next_conn.fetch_add(1, Ordering::Relaxed),
            peer,
            grant: Mutex::new((!authenticate).then(auth::Grant::local)),
            closing: CancellationToken::new(),
            out: tx,
            next_out: AtomicU64::new(1),
            prompts: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            answerer: Mutex::new(None),
        });
        let writer_task = tokio::spawn(async move {
            while let Some(mut line) = rx.recv().await {
                line.push('\n');
                if writer.write_all(line.as_bytes()).await.is_err() || writer.flush().await.is_err()
                {
                    break;
                }
            }
        });
        // Requests run in the order they arrive, one at a time, except `approval/request`, which
        // may wait on an answerer for long and so runs beside the others once admitted.
        let (calls, mut queue) = mpsc::unbounded_channel::<Call>();
        let dispatcher = {
            let server = self.clone();
            let conn = conn.clone();
            tokio::spawn(async move {
                let mut asks = tokio::task::JoinSet::new();
                while let Some((id, method, params)) = queue.recv().await {
                    // Both may wait on an answerer for long.
                    if method == "approval/request" || method == "hook/claude-code" {
                        let server = server.clone();
                        let conn = conn.clone();
                        asks.spawn(async move {
                            let result = server.call(&conn, &id, &method, params).await;
                            conn.send(rpc::response(&id, result));
                        });
                    } else {
                        let result = server.call(&conn, &id, &method, params).await;
                        conn.send(rpc::response(&id, result));
                    }
                }
                // The client stopped sending: it can no longer answer prompts (they settle
                // `unavailable`), but its questions still finish and are answered and audited.
                conn.lock_answerer().take();
                conn.lock_prompts().clear();
                while asks.join_next().await.is_some() {}
            })
        };
        let mut reader = tokio::io::BufReader::new(reader);
        let mut line = Vec::new();
        loop {
            let read = tokio::select! {
                read = rpc::read_line(&mut reader, &mut line) => read,
                () = conn.closing.cancelled() => break,
            };
            match read {
                Ok(rpc::Line::Text) => match std::str::from_utf8(&line) {
                    Ok(text) => self.handle_line(&conn, &calls, text),
                    Err(_) => conn.send(rpc::response(
                        &Value::Null,
                        Err(RpcError::new(rpc::PARSE_ERROR, "parse error: not UTF-8")),
                    )),
                },
                Ok(rpc::Line::TooLong) => conn.send(rpc::response(
                    &Value::Null,
                    Err(RpcError::new(
                        rpc::INVALID_REQUEST,
                        "message longer than 1 MiB; skipped",
                    )),
                )),
                Ok(rpc::Line::End) | Err(_) => break,
            }
        }
        drop(calls);
        let _ = dispatcher.await;
        self.disconnect(&conn).await;
        drop(conn);
        let _ = writer_task.await;
    }

    /// Releases what a closed connection held: its answerer, its pending prompts (they settle
    /// `unavailable`), its requests (cancelled) and its sessions (open turns are ended).
    async fn disconnect(&self, conn: &Arc<Conn>) {
        conn.lock_answerer().take();
        conn.lock_prompts().clear();
        for (_, token) in conn.lock_inflight().drain() {
            token.cancel();
        }
        let owned: Vec<String> = {
            let mut sessions = self.inner.lock_sessions();
            let ids: Vec<String> = sessions
                .iter()
                .filter(|(_, e)| e.owner == conn.id)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &ids {
                sessions.remove(id);
            }
            ids
        };
        for session in owned {
            if self
                .inner
                .service
                .turn_open(&session)
                .await
                .unwrap_or(false)
            {
                let _ = self.inner.service.end_turn(&session).await;
            }
        }
    }

    fn handle_line(&self, conn: &Arc<Conn>, queue: &mpsc::UnboundedSender<Call>, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        let message: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                conn.send(rpc::response(
                    &Value::Null,
                    Err(RpcError::new(rpc::PARSE_ERROR, format!("parse error: {e}"))),
                ));
                return;
            }
        };
        let id = message.get("id").cloned();
        match (message.get("method").and_then(Value::as_str), id) {
            (Some(method), Some(id)) if !id.is_null() => {
                let params = message.get("params").cloned().unwrap_or(Value::Null);
                let _ = queue.send((id, method.to_owned(), params));
            }
            (Some("$/cancel_request"), _) => {
                if let Some(id) = message.pointer("/params/id")
                    && let Some(token) = conn.lock_inflight().get(&id.to_string())
                {
                    token.cancel();
                }
            }
            (Some(_), _) => {} // Unknown notifications are ignored, as JSON-RPC asks.
            (None, Some(id))
                if message.get("result").is_some() || message.get("error").is_some() =>
            {
                let answer = match message.get("error") {
                    Some(e) => Err(RpcError::new(
                        e.get("code").and_then(Value::as_i64).unwrap_or(0),
                        e.get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("error")
                            .to_owned(),
                    )),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                if let Some(waiter) = id.as_u64().and_then(|id| conn.lock_prompts().remove(&id)) {
                    let _ = waiter.send(answer);
                }
            }
            (None, id) => conn.send(rpc::response(
                &id.unwrap_or(Value::Null),
                Err(RpcError::new(
                    rpc::INVALID_REQUEST,
                    "not a JSON-RPC request, notification or response",
                )),
            )),
        }
    }

    /// Authenticates (`initialize` with a token) or checks that the connection's grant allows
    /// `method`. A connection that fails to authenticate is closed after the error is sent.
    pub(super) fn admit(
        &self,
        conn: &Conn,
        method: &str,
        params: &Value,
    ) -> Result<auth::Grant, RpcError> {
        let current = conn.grant.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let grant = match current {
            Some(grant) => grant,
            None if method == "initialize" => {
                let token = params.get("token").and_then(Value::as_str);
                match self.inner.gatekeeper.check(&conn.peer, token) {
                    Ok(grant) => {
                        *conn.grant.lock().unwrap_or_else(|p| p.into_inner()) = Some(grant.clone());
                        grant
                    }
                    Err(text) => {
                        conn.closing.cancel();
                        return Err(RpcError::new(auth::UNAUTHENTICATED, text));
                    }
                }
            }
            None => {
                conn.closing.cancel();
                return Err(RpcError::new(
                    auth::UNAUTHENTICATED,
                    auth::NOT_AUTHENTICATED,
                ));
            }
        };
        match auth::role_for(method) {
            Some(role) if !grant.has(role) => Err(forbidden(&grant, method, role)),
            _ => Ok(grant),
        }
    }

    pub(super) fn owned(&self, conn: &Conn, params: &Value) -> Result<(String, Agent), RpcError> {
        let session = str_param(params, "sessionId")?;
        let sessions = self.inner.lock_sessions();
        match sessions.get(session) {
            Some(e) if e.owner == conn.id => Ok((session.to_owned(), e.agent.clone())),
            Some(_) => Err(RpcError::new(
                rpc::NOT_OWNER,
                format!("session {session:?} is owned by another connection"),
            )),
            None => Err(RpcError::new(
                rpc::NOT_OWNER,
                format!("session {session:?} is not open on this connection (session/open first)"),
            )),
        }
    }
}

pub(super) type PromptWaiter = oneshot::Sender<Result<Value, RpcError>>;

/// A request waiting its turn: id, method, params.
pub(super) type Call = (Value, String, Value);

/// The error for a call the token's roles do not allow.
pub(super) fn forbidden(grant: &auth::Grant, what: &str, role: TokenRole) -> RpcError {
    RpcError::new(
        auth::FORBIDDEN,
        format!(
            "token {:?} may not {what}: that needs the {role} role",
            grant.name
        ),
    )
}

/// One client connection.
pub(super) struct Conn {
    pub(super) id: u64,
    /// Where it comes from, for logs and the failure count: `stdio`, `unix socket`, `tcp <ip>`.
    pub(super) peer: String,
    /// What it may do; `None` until it has authenticated.
    pub(super) grant: Mutex<Option<auth::Grant>>,
    /// Cancelled to close the connection (a failed authentication).
    pub(super) closing: CancellationToken,
    pub(super) out: mpsc::UnboundedSender<String>,
    pub(super) next_out: AtomicU64,
    pub(super) prompts: Mutex<HashMap<u64, PromptWaiter>>,
    pub(super) inflight: Mutex<HashMap<String, CancellationToken>>,
    pub(super) answerer: Mutex<Option<Registration>>,
}

impl Conn {
    pub(super) fn send(&self, line: String) {
        let _ = self.out.send(line);
    }

    pub(super) fn lock_grant(&self) -> MutexGuard<'_, Option<auth::Grant>> {
        self.grant.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn lock_prompts(&self) -> MutexGuard<'_, HashMap<u64, PromptWaiter>> {
        self.prompts.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn lock_inflight(&self) -> MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn lock_answerer(&self) -> MutexGuard<'_, Option<Registration>> {
        self.answerer.lock().unwrap_or_else(|p| p.into_inner())
    }
}
