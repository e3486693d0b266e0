//! Plugin API 0.3 (`approval:plugin@0.3.x`): the bindings, the host functions, and the mapping
//! between the 0.3 types and the host's. Over 0.2 it adds outbound HTTP (`wasi:http`), sent by
//! the host to the hosts the plugin's entry grants ([`super::net`]); its types and host
//! functions are 0.2's, so each maps there.

use wasmtime::Store;

use super::sandbox::PluginState;
use super::v0_2;
use crate::answer::Answer;
use crate::waterfall::Question;

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit/approval-0.3.wit",
        world: "answerer",
        // The request is lowered from borrowed strings: no copy of the question per decision.
        ownership: Borrowing {
            duplicate_if_necessary: true
        },
    });
}

use bindings::approval::plugin::{host, types};

/// The version this module was generated from.
pub(crate) const VERSION: &str = "0.3.0";

impl types::Host for PluginState {}

/// 0.3's host interface is 0.2's: each function forwards there.
impl host::Host for PluginState {
    fn log(&mut self, level: host::Level, message: String) {
        use v0_2::Level as L;
        let level = match level {
            host::Level::Trace => L::Trace,
            host::Level::Debug => L::Debug,
            host::Level::Info => L::Info,
            host::Level::Warn => L::Warn,
            host::Level::Error => L::Error,
        };
        v0_2::Host::log(self, level, message);
    }

    fn config(&mut self, key: String) -> Option<String> {
        v0_2::Host::config(self, key)
    }

    fn call_arguments(&mut self, call_id: String) -> Option<String> {
        v0_2::Host::call_arguments(self, call_id)
    }

    fn verify_signature(&mut self, secret: String, message: Vec<u8>, signature: Vec<u8>) -> bool {
        // A check is an oracle on the key: a handful a decision, not millions.
        self.signature_checks += 1;
        if self.signature_checks > super::secret::MAX_CHECKS {
            self.shared.log(
                super::LogLevel::Warn,
                &format!(
                    "verify-signature: more than {} checks in one decision",
                    super::secret::MAX_CHECKS
                ),
            );
            return false;
        }
        match self.shared.spec.secrets.get(&secret) {
            Some(key) => super::secret::verify(key, &message, &signature),
            None => {
                self.shared.log(
                    super::LogLevel::Warn,
                    &format!("verify-signature: no secret named {secret:?}"),
                );
                false
            }
        }
    }
}

super::world::linked_world!("0.3");

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
        let decision = self.bindings.call_decide(&mut *store, request)?;
        // A secret's value that reached the plugin goes no further: not into the audit as a
        // reason (scrubbed before the reason is cut, so no part of a value survives the cut),
        // not into a standing rule.
        let shared = &store.data().shared;
        let mut answer = v0_2::answer(as_0_2(decision, |text| shared.scrub(&text).into_owned()));
        let leaks = |text: &str| shared.scrub(text) != text;
        if answer
            .proposal
            .as_ref()
            .is_some_and(|p| leaks(&p.tool) || p.pattern.as_deref().is_some_and(leaks))
        {
            tracing::warn!(plugin = %shared.spec.name, "a plugin's proposed rule holds a secret; its decision stands for this call only");
            answer.proposal = None;
        }
        Ok(answer)
    }
}

/// A 0.3 decision as the 0.2 decision it is (the types are the same), its reasons passed
/// through `scrub`.
fn as_0_2(decision: types::Decision, scrub: impl Fn(String) -> String) -> v0_2::ApiDecision {
    use v0_2::ApiDecision as D;
    let rule = |rule: types::Rule| v0_2::Rule {
        tool: rule.tool,
        pattern: rule.pattern,
        scope: match rule.scope {
            types::Scope::Session => v0_2::Scope::Session,
            types::Scope::Project => v0_2::Scope::Project,
            types::Scope::User => v0_2::Scope::User,
        },
        reason: rule.reason.map(&scrub),
    };
    match decision {
        types::Decision::AllowOnce => D::AllowOnce,
        types::Decision::Reject(reason) => D::Reject(reason.map(&scrub)),
        types::Decision::Cancel => D::Cancel,
        types::Decision::Next => D::Next,
        types::Decision::AllowAlways(r) => D::AllowAlways(rule(r)),
        types::Decision::RejectAlways(r) => D::RejectAlways(rule(r)),
    }
}
