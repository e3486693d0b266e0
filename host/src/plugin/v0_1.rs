//! Plugin API 0.1 (`approval:plugin@0.1.x`): the bindings, the host functions, and the mapping
//! between the 0.1 types and the host's. A future API version adds a sibling module; this one
//! stays so 0.1 plugins keep loading.

use wasmtime::Store;

use super::sandbox::PluginState;
use crate::answer::Answer;
use crate::outcome::Decision;
use crate::waterfall::Question;

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit/approval-0.1.wit",
        world: "answerer",
        // The request is lowered from borrowed strings: no copy of the question per decision.
        ownership: Borrowing {
            duplicate_if_necessary: true
        },
    });
}

use bindings::approval::plugin::{host, types};

/// The version this module was generated from.
pub(crate) const VERSION: &str = "0.1.0";

impl types::Host for PluginState {}

/// 0.1's host interface is 0.2's: each function forwards there.
impl host::Host for PluginState {
    fn log(&mut self, level: host::Level, message: String) {
        use super::v0_2::Level as L;
        let level = match level {
            host::Level::Trace => L::Trace,
            host::Level::Debug => L::Debug,
            host::Level::Info => L::Info,
            host::Level::Warn => L::Warn,
            host::Level::Error => L::Error,
        };
        super::v0_2::Host::log(self, level, message);
    }

    fn config(&mut self, key: String) -> Option<String> {
        super::v0_2::Host::config(self, key)
    }

    fn call_arguments(&mut self, call_id: String) -> Option<String> {
        super::v0_2::Host::call_arguments(self, call_id)
    }
}

super::world::linked_world!("0.1");

impl Instance {
    pub(crate) fn decide(
        &self,
        store: &mut Store<PluginState>,
        question: &Question,
    ) -> wasmtime::Result<Answer> {
        let request = types::Request {
            agent: question.agent().id(),
            session: question.session_id(),
            tool_name: question.tool_name(),
            call_id: question.call_id(),
            reason: question.reason(),
        };
        Ok(Answer::from(
            match self.bindings.call_decide(store, request)? {
                types::Decision::AllowOnce => Decision::AllowOnce,
                types::Decision::Reject => Decision::Reject,
                types::Decision::Cancel => Decision::Cancel,
                types::Decision::Next => Decision::Next,
            },
        ))
    }
}
