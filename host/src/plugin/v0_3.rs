//! Plugin API 0.3 (`approval:plugin@0.3.x`): the bindings, the host functions, and the mapping
//! between the 0.3 types and the host's. Over 0.2 it adds outbound HTTP (`wasi:http`), sent by
//! the host to the hosts the plugin's entry grants ([`super::net`]), answers that wait
//! (`pending`, settled by the `callback` export: [`super::pending`]) and signature checks; its
//! other types and host functions are 0.2's, so each maps there.

use wasmtime::Store;

use super::pending::{Ruling, Settlement};
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
        // What a plugin that reaches out or waits can send on, `[audit] redact` has had its say.
        if self.shared.spec.leaves_process() {
            return self
                .question
                .as_ref()?
                .call_arguments_shown(&call_id)
                .map(|v| v.to_string());
        }
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
    ) -> wasmtime::Result<Ruling> {
        // A plugin that reaches out or waits sends what it reads elsewhere: the values
        // `[audit] redact` names never reach it, as they never reach the console.
        let shown = store
            .data()
            .shared
            .spec
            .leaves_process()
            .then(|| question.arguments_shown().map(|v| v.to_string()));
        let arguments = match &shown {
            Some(shown) => shown.as_deref(),
            None => question.arguments_json(),
        };
        let request = types::Request {
            id: question.id(),
            agent: question.agent().id(),
            parent_agent: question.agent().parent_id(),
            session: question.session_id(),
            tool_name: question.tool_name(),
            call_id: question.call_id(),
            reason: question.reason(),
            arguments,
            cwd: question.cwd(),
            sandbox_mode: question.sandbox_mode(),
            can_wait: store.data().can_wait,
        };
        let decision = self.bindings.call_decide(&mut *store, request)?;
        let shared = &store.data().shared;
        Ok(
            match as_0_2(decision, |text| shared.scrub(&text).into_owned()) {
                Err(correlation) => Ruling::Pending(correlation),
                Ok(decision) => Ruling::Answer(scrubbed_answer(shared, decision)),
            },
        )
    }

    /// Runs the plugin's `callback` export over a request that arrived for it: the settlement
    /// it reads from it, or its refusal (`Ok(Err(why))`, scrubbed of its secrets).
    pub(crate) fn callback(
        &self,
        store: &mut Store<PluginState>,
        request: &super::pending::CallbackRequest,
    ) -> wasmtime::Result<Result<Settlement, String>> {
        let headers: Vec<(&str, &[u8])> = request
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_slice()))
            .collect();
        let call = types::CallbackRequest {
            method: &request.method,
            query: &request.query,
            headers: &headers,
            body: &request.body,
        };
        let said = self.bindings.call_callback(&mut *store, call)?;
        let shared = &store.data().shared;
        Ok(match said {
            Err(why) => Err(shared.scrub(&why).into_owned()),
            Ok(settlement) => {
                match as_0_2(settlement.decision, |text| shared.scrub(&text).into_owned()) {
                    Err(_) => Err("a callback cannot answer pending".to_owned()),
                    Ok(decision) => {
                        let mut answer = scrubbed_answer(shared, decision);
                        answer.by = settlement
                            .by
                            .as_deref()
                            .and_then(|by| super::pending::clean_by(&shared.scrub(by)))
                            .map(|by| format!("{}:{by}", shared.spec.name));
                        Ok(Settlement {
                            correlation: settlement.correlation,
                            answer,
                        })
                    }
                }
            }
        })
    }
}

/// A 0.2 decision as the host's answer. A secret's value that reached the plugin goes no
/// further: not into the audit as a reason (scrubbed before the reason is cut, so no part of a
/// value survives the cut), not into a standing rule.
fn scrubbed_answer(shared: &super::shared::Shared, decision: v0_2::ApiDecision) -> Answer {
    let mut answer = v0_2::answer(decision);
    let leaks = |text: &str| shared.scrub(text) != text;
    if answer
        .proposal
        .as_ref()
        .is_some_and(|p| leaks(&p.tool) || p.pattern.as_deref().is_some_and(leaks))
    {
        tracing::warn!(plugin = %shared.spec.name, "a plugin's proposed rule holds a secret; its decision stands for this call only");
        answer.proposal = None;
    }
    answer
}

/// A 0.3 decision as the 0.2 decision it is (the types are the same), its reasons passed
/// through `scrub`; `Err(correlation)` for `pending`, which 0.2 cannot say.
fn as_0_2(
    decision: types::Decision,
    scrub: impl Fn(String) -> String,
) -> Result<v0_2::ApiDecision, String> {
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
    Ok(match decision {
        types::Decision::AllowOnce => D::AllowOnce,
        types::Decision::Reject(reason) => D::Reject(reason.map(&scrub)),
        types::Decision::Cancel => D::Cancel,
        types::Decision::Next => D::Next,
        types::Decision::AllowAlways(r) => D::AllowAlways(rule(r)),
        types::Decision::RejectAlways(r) => D::RejectAlways(rule(r)),
        types::Decision::Pending(correlation) => return Err(correlation),
    })
}
