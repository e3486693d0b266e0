//! The JSON-RPC methods of `serve`, by name: `initialize`, sessions and turns, tool calls and
//! approval requests, policy and context, plugins; `rules/*` in `rules.rs`, `hook/claude-code` in
//! `hook.rs`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::answerer::ClientAnswerer;
use super::connection::{Conn, forbidden};
use crate::cli_hooks::Cli;

use super::{PLUGIN_API_VERSIONS, PROTOCOL_VERSION, Server, SessionEntry, auth, hook, rpc, rules};
use crate::config::token::TokenRole;
use crate::outcome::Outcome;
use crate::policy::Policy;
use crate::service::ApprovalRequest;
use crate::tools::texts;
use crate::waterfall::{Position, Scope};
use rpc::{RpcError, opt_str_param, str_param};

impl Server {
    /// Refuses a session beyond the token's share of open sessions.
    fn within_session_share(&self, grant: &auth::Grant) -> Result<(), RpcError> {
        let most = self.inner.admission.limits().sessions_per_token;
        let open = self
            .inner
            .lock_sessions()
            .values()
            .filter(|e| e.token == grant.name)
            .count();
        if open >= most {
            super::limits::Counters::count(&self.inner.admission.counters.refused_sessions);
            return Err(RpcError::new(
                super::limits::LIMITED,
                super::limits::too_many_sessions(&grant.name, most),
            ));
        }
        Ok(())
    }

    pub(super) async fn call(
        &self,
        conn: &Arc<Conn>,
        id: &Value,
        method: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        let service = &self.inner.service;
        let grant = self.admit(conn, method, &params)?;
        match method {
            "initialize" => {
                if params.get("answerer").and_then(Value::as_bool) == Some(true) {
                    if !grant.has(TokenRole::Answerer) {
                        return Err(forbidden(&grant, "answer prompts", TokenRole::Answerer));
                    }
                    let listener = ClientAnswerer {
                        server: Arc::downgrade(&self.inner),
                        conn: Arc::downgrade(conn),
                    };
                    let reg = service.register(
                        format!("client-{}", conn.id),
                        Scope::Global,
                        Position::Last,
                        listener,
                    );
                    *conn.lock_answerer() = Some(reg);
                }
                Ok(json!({
                    "serverInfo": {"name": "approval-host", "version": env!("CARGO_PKG_VERSION")},
                    "protocolVersion": PROTOCOL_VERSION,
                    "pluginApiVersions": PLUGIN_API_VERSIONS,
                }))
            }
            "session/open" => {
                let session = str_param(&params, "sessionId")?;
                if !grant.may_open(session) {
                    return Err(RpcError::new(
                        auth::FORBIDDEN,
                        format!(
                            "token {:?} may not open session {session:?}: it may open {}",
                            grant.name,
                            crate::config::token::describe_sessions(&grant.sessions)
                        ),
                    ));
                }
                self.inner.hook_owners.check_open(session, &grant.name)?;
                self.within_session_share(&grant)?;
                let agent_id = str_param(&params, "agentId")?;
                let parent_id = opt_str_param(&params, "parentAgentId")?;
                if let Some(e) = self.inner.lock_sessions().get(session) {
                    return Err(RpcError::new(
                        rpc::NOT_OWNER,
                        if e.owner == conn.id {
                            format!("session {session:?} is already open on this connection")
                        } else {
                            format!("session {session:?} is owned by another connection")
                        },
                    ));
                }
                let parent = match parent_id {
                    None => None,
                    Some(pid) => Some(
                        self.inner
                            .lock_sessions()
                            .values()
                            .find(|e| e.owner == conn.id && e.agent.id() == pid)
                            .map(|e| e.agent.clone())
                            .ok_or_else(|| {
                                RpcError::params(format!(
                                    "parentAgentId {pid:?} is not an agent of a session this connection owns"
                                ))
                            })?,
                    ),
                };
                let agent = match &parent {
                    Some(parent) => service.subagent(parent, session, agent_id).await,
                    None => service.agent(session, agent_id).await,
                }
                .map_err(RpcError::failed)?;
                let mut sessions = self.inner.lock_sessions();
                if sessions.contains_key(session) {
                    return Err(RpcError::new(
                        rpc::NOT_OWNER,
                        format!("session {session:?} was opened by another connection meanwhile"),
                    ));
                }
                // Again under the lock: the token's other connections may have opened some since.
                let most = self.inner.admission.limits().sessions_per_token;
                if sessions.values().filter(|e| e.token == grant.name).count() >= most {
                    return Err(RpcError::new(
                        super::limits::LIMITED,
                        super::limits::too_many_sessions(&grant.name, most),
                    ));
                }
                let policy = service.effective_policy(&agent);
                sessions.insert(
                    session.to_owned(),
                    SessionEntry {
                        owner: conn.id,
                        transport: conn.transport(),
                        token: grant.name.clone(),
                        agent,
                    },
                );
                Ok(json!({"sessionId": session, "agentId": agent_id, "policy": policy}))
            }
            "turn/start" | "turn/end" => {
                let (session, _) = self.owned(conn, &params)?;
                if method == "turn/start" {
                    service.start_turn(&session).await
                } else {
                    service.end_turn(&session).await
                }
                .map_err(RpcError::failed)?;
                Ok(json!({}))
            }
            "tool/call" => {
                let (_, agent) = self.owned(conn, &params)?;
                let call_id = str_param(&params, "callId")?;
                let name = str_param(&params, "name")?;
                let arguments = params.get("arguments").cloned().unwrap_or(Value::Null);
                service
                    .record_tool_call(&agent, call_id, name, arguments)
                    .await
                    .map_err(RpcError::failed)?;
                Ok(json!({}))
            }
            "approval/request" => {
                let (_, agent) = self.owned(conn, &params)?;
                let agent_id = str_param(&params, "agentId")?;
                if agent_id != agent.id() {
                    return Err(RpcError::params(format!(
                        "agentId {agent_id:?} is not the session's agent {:?}",
                        agent.id()
                    )));
                }
                let tool = str_param(&params, "toolName")?;
                if tool.is_empty() {
                    return Err(RpcError::params("toolName must not be empty"));
                }
                let token = self.inner.stopping.child_token();
                let mut request = ApprovalRequest::new(&agent, tool).cancel(token.clone());
                if let Some(c) = opt_str_param(&params, "callId")? {
                    request = request.call_id(c);
                }
                if let Some(r) = opt_str_param(&params, "reason")? {
                    request = request.reason(r);
                }
                if let Some(parent) = rpc::trace_parent(&params) {
                    request = request.trace_parent(parent);
                }
                let key = id.to_string();
                conn.lock_inflight().insert(key.clone(), token);
                let result = service.ask(request).await;
                conn.lock_inflight().remove(&key);
                let verdict = result.map_err(RpcError::failed)?;
                let mut result = verdict.to_json();
                // The exact text a model should read for a refusal, so a harness need not
                // rebuild it.
                let message = match verdict.outcome {
                    Outcome::AllowedOnce => None,
                    Outcome::Rejected => Some(texts::rejection(tool, &verdict)),
                    Outcome::Cancelled => Some(texts::approval_cancelled(tool)),
                    Outcome::Unavailable => Some(texts::approval_unavailable(tool)),
                };
                if let Some(m) = message {
                    result["message"] = json!(m);
                }
                Ok(result)
            }
            "policy/set" => {
                let (_, agent) = self.owned(conn, &params)?;
                let value = str_param(&params, "policy")?;
                let policy: Policy = value
                    .parse()
                    .map_err(|e: crate::policy::UnknownPolicy| RpcError::params(e.to_string()))?;
                let changed = service
                    .set_policy(&agent, policy, Some(crate::policy::SOURCE_USER))
                    .await
                    .map_err(RpcError::failed)?;
                Ok(json!({"changed": changed, "policy": policy}))
            }
            "context/get" => {
                let (_, agent) = self.owned(conn, &params)?;
                Ok(json!({
                    "policy": service.effective_policy(&agent),
                    "context": service.runtime_context(&agent),
                    "notices": agent.take_notices(),
                }))
            }
            "plugins/list" => {
                let mounted = self.inner.mounted.lock().await;
                Ok(json!({"plugins": mounted.status(), "shadows": self.inner.shadows().status()}))
            }
            "plugins/reload" => {
                let report = self.reload().await.map_err(RpcError::failed)?;
                let mounted = self.inner.mounted.lock().await;
                Ok(json!({
                    "added": report.added,
                    "swapped": report.swapped,
                    "removed": report.removed,
                    "failed": report.failed.iter().map(|(n, e)| json!({"name": n, "error": e})).collect::<Vec<_>>(),
                    "plugins": mounted.status(),
                    "shadows": self.inner.shadows().status(),
                }))
            }
            m if m == hook::CLAUDE_CODE || Cli::of_method(m).is_some() => {
                let cli = Cli::of_method(m);
                let (method, title) = match cli {
                    Some(cli) => (cli.method(), cli.title()),
                    None => (hook::CLAUDE_CODE, "Claude Code"),
                };
                if !grant.sessions.is_empty() {
                    return Err(RpcError::new(
                        auth::FORBIDDEN,
                        format!(
                            "token {:?} is limited to some sessions and so may not ask for {title}'s sessions",
                            grant.name
                        ),
                    ));
                }
                if let Some(session) = hook::session_of(cli, &params) {
                    if let Some(e) = self.inner.lock_sessions().get(&session)
                        && e.owner != conn.id
                    {
                        return Err(RpcError::new(
                            rpc::NOT_OWNER,
                            format!("session {session:?} is owned by another connection"),
                        ));
                    }
                    self.inner
                        .hook_owners
                        .claim(&session, &grant.name, method)?;
                }
                if hook::is_after(&params) {
                    return hook::after(service, &self.inner.warm, cli, &params).await;
                }
                let cancel = self.inner.stopping.child_token();
                match cli {
                    Some(cli) => {
                        hook::call_cli(
                            service,
                            &self.inner.warm,
                            &self.inner.hook_turns,
                            cli,
                            &params,
                            cancel,
                        )
                        .await
                    }
                    None => {
                        let base = self
                            .inner
                            .hook_options
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .clone();
                        hook::call(
                            service,
                            &self.inner.warm,
                            &self.inner.hook_turns,
                            base,
                            &params,
                            cancel,
                        )
                        .await
                    }
                }
            }
            m if m.starts_with("rules/") => {
                let session = match params.get("sessionId") {
                    None | Some(Value::Null) => None,
                    Some(_) => Some(self.owned(conn, &params)?.0),
                };
                rules::call(
                    service,
                    &format!("client-{}", conn.id),
                    &grant,
                    m,
                    &params,
                    session.as_deref(),
                )
                .await
            }
            other => Err(RpcError::new(
                rpc::METHOD_NOT_FOUND,
                format!("unknown method {other:?}"),
            )),
        }
    }
}
