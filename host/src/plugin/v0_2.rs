//! Plugin API 0.2 (`approval:plugin@0.2.x`): the bindings, the host functions, and the mapping
//! between the 0.2 types and the host's. Over 0.1 it adds reasons, standing-rule proposals,
//! `validate-config` at load, and a richer request (arguments, cwd, sandbox mode).

use wasmtime::Store;

use super::LogLevel;
use super::sandbox::PluginState;
use crate::answer::{Answer, Effect, Proposal, RuleScope, clean_reason};
use crate::outcome::{Decision, Failure, FailureKind};
use crate::waterfall::Question;

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit/approval-0.2.wit",
        world: "answerer",
        // The request is lowered from borrowed strings: no copy of the question per decision.
        ownership: Borrowing {
            duplicate_if_necessary: true
        },
    });
}

use bindings::approval::plugin::{host, types};

/// The 0.2 host interface, which 0.1 and 0.3 forward to.
pub(super) use host::{Host, Level};
/// The 0.2 answer types, which 0.3's map to.
pub(super) use types::{Decision as ApiDecision, Rule, Scope};

/// The version this module was generated from.
pub(crate) const VERSION: &str = "0.2.0";

impl types::Host for PluginState {}

/// The host interface as every API version serves it: 0.1 forwards here.
impl host::Host for PluginState {
    fn log(&mut self, level: host::Level, message: String) {
        let level = match level {
            host::Level::Trace => LogLevel::Trace,
            host::Level::Debug => LogLevel::Debug,
            host::Level::Info => LogLevel::Info,
            host::Level::Warn => LogLevel::Warn,
            host::Level::Error => LogLevel::Error,
        };
        self.shared.log(level, &message);
    }

    fn config(&mut self, key: String) -> Option<String> {
        self.shared.spec.config.get(&key).cloned()
    }

    fn call_arguments(&mut self, call_id: String) -> Option<String> {
        self.question
            .as_ref()?
            .call_arguments(&call_id)
            .map(|v| v.to_string())
    }
}

super::world::linked_world!("0.2");

impl Instance {
    /// Runs the plugin's `validate-config` over its whole config table: `Ok(Err(message))` when
    /// the plugin refuses it.
    pub(crate) fn validate_config(
        &self,
        store: &mut Store<PluginState>,
    ) -> wasmtime::Result<Result<(), String>> {
        let shared = store.data().shared.clone();
        let config: Vec<(&str, &str)> = shared
            .spec
            .config
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.bindings.call_validate_config(store, &config)
    }

    pub(crate) fn decide(
        &self,
        store: &mut Store<PluginState>,
        question: &Question,
    ) -> wasmtime::Result<Answer> {
        let request = types::Request {
            id: question.id(),
            agent: question.agent().id(),
            parent_agent: question.agent().parent_id(),
            session: question.session_id(),
            tool_name: question.tool_name(),
            call_id: question.call_id(),
            reason: question.reason(),
            arguments: question.arguments_json(),
            cwd: question.cwd(),
            sandbox_mode: question.sandbox_mode(),
        };
        Ok(answer(self.bindings.call_decide(store, request)?))
    }
}

/// The host's answer for a 0.2 decision. A proposal that does not hold up (no tool, absurd
/// lengths, control characters) is dropped with the plugin's decision kept one-shot: a bad
/// proposal never widens what is granted.
pub(super) fn answer(decision: types::Decision) -> Answer {
    let (decision, reason, proposal) = match decision {
        types::Decision::AllowOnce => (Decision::AllowOnce, None, None),
        types::Decision::Reject(reason) => (Decision::Reject, reason, None),
        types::Decision::Cancel => (Decision::Cancel, None, None),
        types::Decision::Next => (Decision::Next, None, None),
        types::Decision::AllowAlways(rule) => {
            (Decision::AllowOnce, None, Some((Effect::Allow, rule)))
        }
        types::Decision::RejectAlways(rule) => {
            let reason = rule.reason.clone();
            (Decision::Reject, reason, Some((Effect::Reject, rule)))
        }
    };
    let proposal = match proposal {
        None => None,
        Some((effect, rule)) => {
            let scope = match rule.scope {
                types::Scope::Session => RuleScope::Session,
                types::Scope::Project => RuleScope::Project,
                types::Scope::User => RuleScope::User,
            };
            match Proposal::checked(effect, rule.tool, rule.pattern, scope) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(error = %e, "a plugin's proposed rule was refused; its decision stands for this call only");
                    None
                }
            }
        }
    };
    Answer {
        decision,
        reason: reason.as_deref().and_then(clean_reason),
        proposal,
        rule: None,
        by: None,
        authority: None,
    }
}

/// The failure of a `validate-config` that did not return: kept apart so a load error can say
/// "trapped while checking its config" rather than a decision-time failure.
pub(crate) fn validation_failure(failure: Failure) -> String {
    match failure.kind {
        FailureKind::Timeout => format!("validate-config ran past the plugin's timeout: {failure}"),
        _ => format!("validate-config failed: {failure}"),
    }
}
