//! The standing-rule methods of `serve`: `rules/list`, `rules/add`, `rules/revoke`. A client
//! manages rules through the same book the rule gate decides from, so an added rule decides the
//! next call and a revoked one never decides again once the reply is sent.

use serde_json::{Value, json};

use crate::answer::UnknownWord;
use crate::answer::{Effect, RuleScope};
use crate::rules::{NewRule, RuleError};
use crate::service::ApprovalError;
use crate::service::ApprovalService;

use super::auth::{self, Grant};
use super::rpc::{self, RpcError, opt_str_param, str_param};

fn scope_param(params: &Value) -> Result<Option<RuleScope>, RpcError> {
    opt_str_param(params, "scope")?
        .map(|s| {
            s.parse()
                .map_err(|e: UnknownWord| RpcError::params(e.to_string()))
        })
        .transpose()
}

/// A rule the client got wrong is a params error; a failed write is a failed request.
fn rule_error(e: ApprovalError) -> RpcError {
    match e {
        ApprovalError::Rule(
            r @ (RuleError::Spec(_)
            | RuleError::NoSession
            | RuleError::Unknown(_)
            | RuleError::Static(_)),
        ) => RpcError::params(r.to_string()),
        other => RpcError::failed(other),
    }
}

/// Runs a `rules/*` method for the client `client` holding `grant`; `session` is the session
/// named by the params, already checked to be the client's own.
pub(super) async fn call(
    service: &ApprovalService,
    client: &str,
    grant: &Grant,
    method: &str,
    params: &Value,
    session: Option<&str>,
) -> Result<Value, RpcError> {
    let book = service
        .rules()
        .ok_or_else(|| RpcError::failed("standing rules are off on this server"))?;
    match method {
        "rules/list" => {
            let rules: Vec<_> = book
                .list(scope_param(params)?)
                .into_iter()
                .filter(|r| r.session.is_none() || r.session.as_deref() == session)
                .collect();
            let built_in = service.protected().map(|p| p.views()).unwrap_or_default();
            let broken: Vec<Value> = book
                .broken()
                .into_iter()
                .map(|(log, why)| json!({"log": log, "problem": why}))
                .collect();
            Ok(json!({ "rules": rules, "builtIn": built_in, "brokenLogs": broken }))
        }
        "rules/add" => {
            let rule = str_param(params, "rule")?.to_owned();
            let effect = match opt_str_param(params, "effect")? {
                None | Some("allow") => Effect::Allow,
                Some("reject") => Effect::Reject,
                Some(other) => {
                    return Err(RpcError::params(format!(
                        "effect {other:?} is not \"allow\" or \"reject\""
                    )));
                }
            };
            let scope = scope_param(params)?.unwrap_or(RuleScope::Project);
            grant
                .may_add_rule(scope, session)
                .map_err(|e| RpcError::new(auth::FORBIDDEN, e))?;
            if scope == RuleScope::Session && session.is_none() {
                return Err(RpcError::params(
                    "a session rule needs the sessionId of a session this connection owns",
                ));
            }
            let lasts = opt_str_param(params, "for")?
                .map(|d| {
                    humantime::parse_duration(d)
                        .map_err(|e| RpcError::params(format!("for {d:?}: {e}")))
                })
                .transpose()?;
            let reason = opt_str_param(params, "reason")?.map(str::to_owned);
            let view = service
                .add_rule(NewRule {
                    rule,
                    effect,
                    scope,
                    session: (scope == RuleScope::Session)
                        .then(|| session.map(str::to_owned))
                        .flatten(),
                    lasts,
                    creator: format!("serve:{client}"),
                    reason,
                })
                .await
                .map_err(rule_error)?;
            Ok(json!({ "rule": view }))
        }
        "rules/revoke" => {
            let id = str_param(params, "id")?;
            let rule = book.list(None).into_iter().find(|r| r.id == id);
            grant
                .may_revoke_rule(id, rule.as_ref())
                .map_err(|e| RpcError::new(auth::FORBIDDEN, e))?;
            let reason = opt_str_param(params, "reason")?.map(str::to_owned);
            service
                .revoke_rule(id, &format!("serve:{client}"), reason)
                .await
                .map_err(rule_error)?;
            Ok(json!({ "revoked": id }))
        }
        other => Err(RpcError::new(
            rpc::METHOD_NOT_FOUND,
            format!("unknown method {other:?}"),
        )),
    }
}
