//! The script that stands in for the model in `approval-host acp`: a list of turns, each a list
//! of tool calls and a final message. Each `session/prompt` runs a session's next turn.
//!
//! ```json
//! {"turns": [
//!   {"tool_calls": [{"call_id": "call_00_1", "name": "bash", "arguments": {"command": "ls"}}],
//!    "message": "listed the workspace"}
//! ]}
//! ```
//!
//! Parsing is strict: an unknown key, a wrong type, an empty name or call id, or a call id used
//! twice is an error naming the file and the place (`turns[1].tool_calls[0].call_id`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedCall {
    /// The exact call id.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The JSON arguments (`{}` when omitted).
    pub arguments: Value,
}

/// One scripted turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// The calls, run in order.
    pub tool_calls: Vec<ScriptedCall>,
    /// What the agent says when the calls are done.
    pub message: String,
}

/// A whole script.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Script {
    /// The turns, in order.
    pub turns: Vec<Turn>,
}

/// A script that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not JSON.
    #[error("{path}: not JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// Where and why.
        source: serde_json::Error,
    },
    /// A field is missing or wrong.
    #[error("{path}: {place}: {message}")]
    Field {
        /// The file.
        path: PathBuf,
        /// The field's place, such as `turns[0].tool_calls[1].name`.
        place: String,
        /// What is wrong.
        message: String,
    },
}

impl Script {
    /// Reads a script file.
    pub fn load(path: &Path) -> Result<Script, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.to_owned(),
            source,
        })?;
        Script::parse(path, &text)
    }

    /// Parses a script; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Script, ScriptError> {
        let value: Value = serde_json::from_str(text).map_err(|source| ScriptError::Json {
            path: path.to_owned(),
            source,
        })?;
        Parser { path }.script(&value)
    }
}

struct Parser<'a> {
    path: &'a Path,
}

impl Parser<'_> {
    fn err(&self, place: &str, message: impl Into<String>) -> ScriptError {
        ScriptError::Field {
            path: self.path.to_owned(),
            place: place.to_owned(),
            message: message.into(),
        }
    }

    fn object<'v>(
        &self,
        place: &str,
        v: &'v Value,
        keys: &[&str],
    ) -> Result<&'v Map<String, Value>, ScriptError> {
        let map = v
            .as_object()
            .ok_or_else(|| self.err(place, format!("expected an object, found {}", kind(v))))?;
        if let Some(unknown) = map.keys().find(|k| !keys.contains(&k.as_str())) {
            let at = if place.is_empty() {
                unknown.clone()
            } else {
                format!("{place}.{unknown}")
            };
            return Err(self.err(
                &at,
                format!("unknown key (expected one of: {})", keys.join(", ")),
            ));
        }
        Ok(map)
    }

    fn text(&self, place: &str, v: Option<&Value>) -> Result<String, ScriptError> {
        match v {
            None => Err(self.err(place, "missing")),
            Some(Value::String(s)) if s.is_empty() => Err(self.err(place, "must not be empty")),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => {
                Err(self.err(place, format!("expected a string, found {}", kind(other))))
            }
        }
    }

    fn script(&self, v: &Value) -> Result<Script, ScriptError> {
        let map = self.object("", v, &["turns"])?;
        let turns = match map.get("turns") {
            None => return Err(self.err("turns", "missing")),
            Some(Value::Array(turns)) => turns,
            Some(other) => {
                return Err(self.err("turns", format!("expected an array, found {}", kind(other))));
            }
        };
        let mut first_use: HashMap<String, String> = HashMap::new();
        let mut parsed = Vec::with_capacity(turns.len());
        for (t, turn) in turns.iter().enumerate() {
            let place = format!("turns[{t}]");
            let map = self.object(&place, turn, &["tool_calls", "message"])?;
            let message = match map.get("message") {
                Some(Value::String(s)) => s.clone(),
                None => return Err(self.err(&format!("{place}.message"), "missing")),
                Some(other) => {
                    return Err(self.err(
                        &format!("{place}.message"),
                        format!("expected a string, found {}", kind(other)),
                    ));
                }
            };
            let calls = match map.get("tool_calls") {
                None => &Vec::new(),
                Some(Value::Array(calls)) => calls,
                Some(other) => {
                    return Err(self.err(
                        &format!("{place}.tool_calls"),
                        format!("expected an array, found {}", kind(other)),
                    ));
                }
            };
            let mut tool_calls = Vec::with_capacity(calls.len());
            for (c, call) in calls.iter().enumerate() {
                let at = format!("{place}.tool_calls[{c}]");
                let map = self.object(&at, call, &["call_id", "name", "arguments"])?;
                let call_id = self.text(&format!("{at}.call_id"), map.get("call_id"))?;
                let name = self.text(&format!("{at}.name"), map.get("name"))?;
                let arguments = map
                    .get("arguments")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new()));
                if let Some(first) = first_use.insert(call_id.clone(), at.clone()) {
                    return Err(self.err(
                        &format!("{at}.call_id"),
                        format!("call id {call_id:?} is already used at {first}"),
                    ));
                }
                tool_calls.push(ScriptedCall {
                    call_id,
                    name,
                    arguments,
                });
            }
            parsed.push(Turn {
                tool_calls,
                message,
            });
        }
        Ok(Script { turns: parsed })
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Script, String> {
        Script::parse(Path::new("s.json"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_script_parses_with_default_arguments() {
        let script = parse(
            r#"{"turns": [{"tool_calls": [{"call_id": "c1", "name": "bash"}], "message": "ok"},
                          {"message": "nothing to do"}]}"#,
        )
        .unwrap();
        assert_eq!(script.turns.len(), 2);
        assert_eq!(
            script.turns[0].tool_calls[0].arguments,
            serde_json::json!({})
        );
        assert!(script.turns[1].tool_calls.is_empty());
    }

    #[test]
    fn errors_name_the_file_and_the_place() {
        let cases = [
            (
                r#"{"turn": []}"#,
                "s.json: turn: unknown key (expected one of: turns)",
            ),
            (r#"{}"#, "s.json: turns: missing"),
            (r#"{"turns": [{}]}"#, "s.json: turns[0].message: missing"),
            (
                r#"{"turns": [{"message": "m", "tool_calls": [{"call_id": "c", "name": 3}]}]}"#,
                "s.json: turns[0].tool_calls[0].name: expected a string, found a number",
            ),
            (
                r#"{"turns": [{"message": "m", "tool_calls": [{"call_id": "", "name": "x"}]}]}"#,
                "s.json: turns[0].tool_calls[0].call_id: must not be empty",
            ),
            (
                r#"{"turns": [{"message": "m", "tool_calls": [{"call_id": "c", "name": "x"}]},
                              {"message": "m", "tool_calls": [{"call_id": "c", "name": "y"}]}]}"#,
                "s.json: turns[1].tool_calls[0].call_id: call id \"c\" is already used at turns[0].tool_calls[0]",
            ),
            (
                r#"{"turns": [{"message": "m", "tool_calls": [{"call_id": "c", "name": "x", "args": {}}]}]}"#,
                "s.json: turns[0].tool_calls[0].args: unknown key (expected one of: call_id, name, arguments)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).unwrap_err(), want, "{text}");
        }
        assert!(parse("{").unwrap_err().starts_with("s.json: not JSON: "));
    }
}
