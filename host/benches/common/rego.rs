//! The `allow-tools` gate written in Rego and evaluated by the regorus crate's VM (RVM) in this
//! process: the policy-engine baseline the whole path through the `allow-tools` component is
//! held against.
//!
//! The policy reads the listed tools from `data` (as the component reads its config) and the
//! question from `input`. Two figures: the input built from the question each time (what a gate
//! written this way would do: the same fields the component is handed), and the evaluation alone
//! with one input set once (its floor).

use std::time::{Duration, Instant};

use regorus::languages::rego::compiler::Compiler;
use regorus::rvm::vm::RegoVM;
use regorus::{Engine, Value};

const POLICY: &str = r#"
package allow_tools

import rego.v1

default decision := "next"

decision := "allow-once" if {
    some tool in data.tools
    tool == input.tool_name
}
"#;

const ENTRY: &str = "data.allow_tools.decision";

/// Per-evaluation medians.
pub struct Rego {
    /// The input built from a question's fields, set, and the policy evaluated.
    pub per_question: Duration,
    /// The policy evaluated against an input set once.
    pub evaluate: Duration,
}

fn vm() -> RegoVM {
    let mut engine = Engine::new();
    engine
        .add_policy("allow_tools.rego".to_owned(), POLICY.to_owned())
        .unwrap();
    let data = Value::from_json_str(r#"{"tools": ["read", "bash"]}"#).unwrap();
    engine.add_data(data.clone()).unwrap();
    let compiled = engine.compile_with_entrypoint(&ENTRY.into()).unwrap();
    let program = Compiler::compile_from_policy(&compiled, &[ENTRY]).unwrap();
    let mut vm = RegoVM::new();
    vm.load_program(program);
    vm.set_data(data).unwrap();
    vm
}

/// The question's fields as the gate's input.
fn input(id: &str, tool: &str) -> Value {
    let mut input = Value::new_object();
    let fields = input.as_object_mut().unwrap();
    fields.insert(Value::from("id"), Value::from(id));
    fields.insert(Value::from("agent"), Value::from("a"));
    fields.insert(Value::from("session"), Value::from("bench"));
    fields.insert(Value::from("tool_name"), Value::from(tool));
    input
}

fn decide(vm: &mut RegoVM) -> bool {
    let decision = vm.execute().unwrap();
    decision == Value::from("allow-once")
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Measures both figures over `samples` evaluations each, after a warm-up; every evaluation's
/// decision is checked (half ask about a listed tool, half about one that is not).
pub fn measure(samples: usize) -> Rego {
    let mut vm = vm();
    let id = "0b0e9f4c-3f6e-4a47-9a36-5c1c4d2e8f10";
    for i in 0..samples / 10 {
        vm.set_input(input(id, if i % 2 == 0 { "bash" } else { "grep" }));
        decide(&mut vm);
    }
    let mut per_question = Vec::with_capacity(samples);
    for i in 0..samples {
        let listed = i % 2 == 0;
        let start = Instant::now();
        vm.set_input(input(id, if listed { "bash" } else { "grep" }));
        let allowed = decide(&mut vm);
        per_question.push(start.elapsed());
        assert_eq!(allowed, listed);
    }
    vm.set_input(input(id, "bash"));
    let mut evaluate = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        let allowed = decide(&mut vm);
        evaluate.push(start.elapsed());
        assert!(allowed);
    }
    Rego {
        per_question: median(per_question),
        evaluate: median(evaluate),
    }
}
