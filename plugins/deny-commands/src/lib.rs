//! `deny-commands` gate: reads the call's arguments and rejects it when its `command` contains
//! one of the configured `patterns` (comma-separated substrings, e.g. `patterns = "rm -rf,curl "`).
//! A call without a call id, recorded arguments or a string `command` is not this gate's to
//! judge: it says `next`.

wit_bindgen::generate!({ path: "../../wit", world: "answerer" });

use approval::plugin::host::{self, Level};

struct DenyCommands;

fn command_of(request: &Request) -> Option<String> {
    let call_id = request.call_id.as_deref()?;
    let arguments = host::call_arguments(call_id)?;
    let value: serde_json::Value = serde_json::from_str(&arguments).ok()?;
    value.get("command")?.as_str().map(str::to_owned)
}

impl Guest for DenyCommands {
    fn decide(request: Request) -> Decision {
        let Some(command) = command_of(&request) else {
            return Decision::Next;
        };
        let patterns = host::config("patterns").unwrap_or_default();
        let matched = patterns
            .split(',')
            .map(str::trim)
            .find(|p| !p.is_empty() && command.contains(p));
        match matched {
            Some(pattern) => {
                host::log(Level::Info, &format!("command matches {pattern:?}: rejected"));
                Decision::Reject
            }
            None => Decision::Next,
        }
    }
}

export!(DenyCommands);
