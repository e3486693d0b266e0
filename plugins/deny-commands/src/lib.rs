//! `deny-commands` gate (plugin API 0.2): reads the call's arguments and rejects it when its
//! `command` contains one of the configured `patterns` (comma-separated substrings, e.g.
//! `patterns = "rm -rf,curl "`), saying why: the deployment's `reason` when it sets one, else
//! `the command contains "<pattern>", which this deployment does not allow`. A call without
//! recorded arguments or a string `command` is not this gate's to judge: it says `next`.
//! `patterns` and `reason` are its only config keys; any other is refused at load.

wit_bindgen::generate!({ path: "../../wit/approval-0.2.wit", world: "answerer" });

use approval::plugin::host::{self, Level};

struct DenyCommands;

/// The config keys this gate reads.
const KEYS: [&str; 2] = ["patterns", "reason"];

fn command_of(request: &Request) -> Option<String> {
    // The request carries the asked-about call's arguments only when it has a call id.
    request.call_id.as_ref()?;
    let value: serde_json::Value = serde_json::from_str(request.arguments.as_deref()?).ok()?;
    value.get("command")?.as_str().map(str::to_owned)
}

impl Guest for DenyCommands {
    fn validate_config(config: Vec<(String, String)>) -> Result<(), String> {
        match config.iter().find(|(k, _)| !KEYS.contains(&k.as_str())) {
            Some((key, _)) => Err(format!(
                "unknown key {key:?}: deny-commands reads only \"patterns\" and \"reason\""
            )),
            None => Ok(()),
        }
    }

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
                let reason = host::config("reason").unwrap_or_else(|| {
                    format!("the command contains \"{pattern}\", which this deployment does not allow")
                });
                Decision::Reject(Some(reason))
            }
            None => Decision::Next,
        }
    }
}

export!(DenyCommands);
