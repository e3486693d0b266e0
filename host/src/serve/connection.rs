//! One client connection: lines in and out, authentication in `initialize`, the calls of a
//! connection queued in order, what it owns (sessions, prompts, requests in flight), and what
//! happens when it goes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Server, auth, limits, rpc};
use crate::agent::Agent;
use crate::config::token::TokenRole;
use crate::waterfall::Registration;
use rpc::{RpcError, str_param};

/// Requests a connection may have read and not yet started; past it the connection is not
/// read until one starts (the client waits, the server's memory does not grow).
const CALL_QUEUE: usize = 16;

/// What ended a connection's reading.
enum Ended {
    /// The client closed, or the connection was closed on purpose (a failed authentication).
    Closed,
    /// Its token was revoked.
    Revoked,
}

impl Server {
    /// Serves one client on a reader and writer of JSON lines, as a local client (stdio) that
    /// needs no token.
    pub async fn connection<R, W>(&self, reader: R, writer: W)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        self.connection_as(reader, writer, "stdio".to_owned(), false, None)
            .await;
    }

    /// Serves one client from `peer`, which must first authenticate when `authenticate`;
    /// `slot` is its place among the open connections, freed when it ends.
    pub(super) async fn connection_as<R, W>(
        &self,
        reader: R,
        mut writer: W,
        peer: String,
        authenticate: bool,
        slot: Option<limits::Slot>,
    ) where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let limits = self.inner.admission.limits();
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let conn = Arc::new(Conn {
            id: self.inner.next_conn.fetch_add(1, Ordering::Relaxed),
            peer,
            grant: Mutex::new((!authenticate).then(auth::Grant::local)),
            closing: CancellationToken::new(),
            dropped: CancellationToken::new(),
            out: tx,
            queued: AtomicUsize::new(0),
            invalid_in_a_row: AtomicU32::new(0),
            outbound_limit: limits.outbound_bytes,
            next_out: AtomicU64::new(1),
            prompts: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            answerer: Mutex::new(None),
            server: Arc::downgrade(&self.inner),
        });
        self.inner
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(conn.id, (Arc::downgrade(&conn), !authenticate));
        let writer_task = {
            let conn = conn.clone();
            tokio::spawn(async move {
                // Only a weak hold: the task ends when every sender is gone.
                let (dropped, queued) = (conn.dropped.clone(), Arc::downgrade(&conn));
                drop(conn);
                loop {
                    let line = tokio::select! {
                        line = rx.recv() => line,
                        () = dropped.cancelled() => None,
                    };
                    let Some(mut line) = line else { break };
                    line.push('\n');
                    let wrote = tokio::select! {
                        wrote = async {
                            writer.write_all(line.as_bytes()).await?;
                            writer.flush().await
                        } => wrote.is_ok(),
                        () = dropped.cancelled() => false,
                    };
                    if let Some(conn) = queued.upgrade() {
                        conn.queued.fetch_sub(line.len(), Ordering::Relaxed);
                    }
                    if !wrote {
                        break;
                    }
                }
                let _ = writer.shutdown().await;
            })
        };
        // Requests run in the order they arrive, one at a time, except `approval/request`, which
        // may wait on an answerer for long and so runs beside the others once admitted.
        let (calls, mut queue) = mpsc::channel::<Call>(CALL_QUEUE);
        let dispatcher = {
            let server = self.clone();
            let conn = conn.clone();
            tokio::spawn(async move {
                let mut asks = tokio::task::JoinSet::new();
                while let Some((id, method, params)) = queue.recv().await {
                    // Both may wait on an answerer for long.
                    if method == "approval/request" || method.starts_with("hook/") {
                        while asks.try_join_next().is_some() {}
                        let most = server.inner.admission.limits().requests_in_flight;
                        if asks.len() >= most {
                            limits::Counters::count(
                                &server.inner.admission.counters.refused_requests,
                            );
                            conn.send(rpc::response(
                                &id,
                                Err(RpcError::new(
                                    limits::LIMITED,
                                    limits::too_many_in_flight(most),
                                )),
                            ));
                            continue;
                        }
                        let server = server.clone();
                        let conn = conn.clone();
                        let tracked = server.inner.asking.clone();
                        asks.spawn(tracked.track_future(async move {
                            let result = server.call(&conn, &id, &method, params).await;
                            conn.send(rpc::response(&id, result));
                        }));
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
        let deadline = tokio::time::sleep(limits.authenticate_within);
        tokio::pin!(deadline);
        let ended = loop {
            let revoked = conn.lock_grant().as_ref().map(|g| g.revoked.clone());
            let read = tokio::select! {
                read = rpc::read_line(&mut reader, &mut line) => read,
                () = conn.closing.cancelled() => break Ended::Closed,
                () = async { match &revoked {
                    Some(revoked) => revoked.cancelled().await,
                    None => std::future::pending().await,
                } } => break Ended::Revoked,
                () = &mut deadline, if conn.lock_grant().is_none() => {
                    limits::Counters::count(&self.inner.admission.counters.late_authentication);
                    tracing::warn!(peer = conn.peer, "closed: not authenticated in time");
                    conn.send(rpc::response(
                        &Value::Null,
                        Err(RpcError::new(
                            auth::UNAUTHENTICATED,
                            limits::authenticate_too_late(limits.authenticate_within),
                        )),
                    ));
                    break Ended::Closed;
                }
            };
            let call = match read {
                Ok(rpc::Line::Text) => match std::str::from_utf8(&line) {
                    Ok(text) => self.handle_line(&conn, text),
                    Err(_) => conn.refuse(
                        &Value::Null,
                        RpcError::new(rpc::PARSE_ERROR, "parse error: not UTF-8"),
                    ),
                },
                Ok(rpc::Line::TooLong) => conn.refuse(
                    &Value::Null,
                    RpcError::new(rpc::INVALID_REQUEST, "message longer than 1 MiB; skipped"),
                ),
                Ok(rpc::Line::End) | Err(_) => break Ended::Closed,
            };
            // A line that closed the connection (before authentication) is the last one read.
            if conn.closing.is_cancelled() {
                break Ended::Closed;
            }
            if let Some(call) = call {
                let sent = tokio::select! {
                    sent = calls.send(call) => sent.is_ok(),
                    () = conn.closing.cancelled() => false,
                };
                if !sent {
                    break Ended::Closed;
                }
            }
        };
        if matches!(ended, Ended::Revoked) || conn.dropped.is_cancelled() {
            // Whatever the token let in ends now: its questions are withdrawn, not waited on.
            if matches!(ended, Ended::Revoked) {
                tracing::info!(peer = conn.peer, "closed: the token was revoked");
                conn.send(rpc::response(
                    &Value::Null,
                    Err(RpcError::new(auth::UNAUTHENTICATED, auth::REVOKED)),
                ));
            }
            for (_, token) in conn.lock_inflight().drain() {
                token.cancel();
            }
        }
        drop(calls);
        let _ = dispatcher.await;
        self.disconnect(&conn).await;
        drop(conn);
        // A client that stopped reading has as long to take its last replies as a new one has to
        // authenticate.
        if tokio::time::timeout(limits.authenticate_within, writer_task)
            .await
            .is_err()
        {
            tracing::warn!("closed: the client did not take its last replies");
        }
        drop(slot);
    }

    /// Releases what a closed connection held: its answerer, its pending prompts (they settle
    /// `unavailable`), its requests (cancelled) and its sessions (open turns are ended).
    async fn disconnect(&self, conn: &Arc<Conn>) {
        self.inner
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&conn.id);
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
            let _ = self.inner.service.end_turn_if_open(&session).await;
        }
    }

    /// Reads one line: the request to queue, if it is one. Until the connection has
    /// authenticated, anything but an `initialize` that authenticates closes it with one error.
    fn handle_line(&self, conn: &Arc<Conn>, line: &str) -> Option<Call> {
        if line.trim().is_empty() {
            return None;
        }
        let unauthenticated = conn.lock_grant().is_none();
        let message: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                return conn.refuse(
                    &Value::Null,
                    RpcError::new(rpc::PARSE_ERROR, format!("parse error: {e}")),
                );
            }
        };
        let id = message.get("id").cloned();
        if unauthenticated {
            return match (message.get("method").and_then(Value::as_str), id) {
                (Some(method), Some(id)) if !id.is_null() => {
                    let params = message.get("params").cloned().unwrap_or(Value::Null);
                    match self.admit(conn, method, &params) {
                        Ok(_) => Some((id, method.to_owned(), params)),
                        Err(e) => {
                            conn.send(rpc::response(&id, Err(e)));
                            None
                        }
                    }
                }
                (_, id) => conn.refuse(
                    &id.unwrap_or(Value::Null),
                    RpcError::new(auth::UNAUTHENTICATED, auth::NOT_AUTHENTICATED),
                ),
            };
        }
        match (message.get("method").and_then(Value::as_str), id) {
            (Some(method), Some(id)) if !id.is_null() => {
                conn.valid_message();
                let params = message.get("params").cloned().unwrap_or(Value::Null);
                return Some((id, method.to_owned(), params));
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
            (None, id) => {
                return conn.refuse(
                    &id.unwrap_or(Value::Null),
                    RpcError::new(
                        rpc::INVALID_REQUEST,
                        "not a JSON-RPC request, notification or response",
                    ),
                );
            }
        }
        // A notification or a response: valid.
        conn.valid_message();
        None
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
    /// Cancelled to drop the connection without a word (a client that does not read).
    pub(super) dropped: CancellationToken,
    pub(super) out: mpsc::UnboundedSender<String>,
    /// Bytes of replies waiting to be written.
    pub(super) queued: AtomicUsize,
    /// Invalid messages since the last valid one.
    pub(super) invalid_in_a_row: AtomicU32,
    /// Past this many bytes waiting, the client is not reading and is dropped.
    pub(super) outbound_limit: usize,
    pub(super) next_out: AtomicU64,
    pub(super) prompts: Mutex<HashMap<u64, PromptWaiter>>,
    pub(super) inflight: Mutex<HashMap<String, CancellationToken>>,
    pub(super) answerer: Mutex<Option<Registration>>,
    /// For the count of clients dropped for not reading.
    server: Weak<super::Inner>,
}

impl Conn {
    /// How the connection came in: `stdio`, `unix` or `tcp` (from its peer name).
    pub(super) fn transport(&self) -> &'static str {
        match self.peer.split(' ').next() {
            Some("stdio") => "stdio",
            Some("unix") => "unix",
            _ => "tcp",
        }
    }

    /// Queues a line for the client. A client with more than its share of bytes waiting is not
    /// reading: it is dropped (one line on its own may be larger, so a big reply still goes).
    pub(super) fn send(&self, line: String) {
        let len = line.len() + 1;
        let queued = self.queued.fetch_add(len, Ordering::Relaxed) + len;
        if queued > self.outbound_limit && queued != len {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            if !self.dropped.is_cancelled() {
                tracing::warn!(
                    peer = self.peer,
                    queued,
                    "dropped: the client does not read its replies"
                );
                if let Some(server) = self.server.upgrade() {
                    limits::Counters::count(&server.admission.counters.not_reading);
                }
                self.dropped.cancel();
                self.closing.cancel();
            }
            return;
        }
        let _ = self.out.send(line);
    }

    /// A valid message ends a run of invalid ones.
    fn valid_message(&self) {
        self.invalid_in_a_row.store(0, Ordering::Relaxed);
    }

    /// Answers with an error; before authentication, the error closes the connection, and so
    /// does the [`limits::INVALID_IN_A_ROW`]th invalid message in a row after it (a client that
    /// sends nothing but garbage is made to pay for it, not the server).
    fn refuse(&self, id: &Value, error: RpcError) -> Option<Call> {
        let in_a_row = self.invalid_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        let authenticated = self.lock_grant().is_some();
        if in_a_row >= limits::INVALID_IN_A_ROW && authenticated {
            self.send(rpc::response(
                id,
                Err(RpcError::new(error.code, limits::TOO_MANY_INVALID)),
            ));
            self.closing.cancel();
        } else if !authenticated {
            self.send(rpc::response(
                id,
                Err(RpcError::new(
                    auth::UNAUTHENTICATED,
                    auth::NOT_AUTHENTICATED,
                )),
            ));
            self.closing.cancel();
        } else {
            self.send(rpc::response(id, Err(error)));
        }
        None
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
