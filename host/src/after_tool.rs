//! What an agent CLI's after-tool hook records (Claude Code's and Codex's `PostToolUse`, Gemini
//! CLI's `AfterTool`, Copilot CLI's `postToolUse`): the alarm for a guard that stopped gating.
//!
//! The before-tool hook is the guard; if it failed, timed out or was skipped while the CLI went
//! on, the call ran unasked and nothing else would say so. The after-tool hook runs once the call
//! ran and only records: it finds the call's question in the session's log (by the CLI's call id
//! where it gives one, else by tool and arguments among the session's questions whose call has
//! not been seen to run yet), and
//!
//! - when a question allowed it, or nobody decided and the CLI asked its own user, writes
//!   `tool/result {callId, isError: false, content: null}` (the result itself is not kept): the
//!   call ran, and its question is not matched again;
//! - when no question is about it, its question was rejected or cancelled, or its question was
//!   never answered (still open, or settled only because the hook died), writes
//!   `approval/unasked` ([`Unasked`]), which `log` and `verify` report.
//!
//! It never blocks: the call has run.

use serde_json::Value;

use crate::agent::Agent;
use crate::audit::event::Record;
use crate::audit::event::{Event, ToolResult, Unasked, UnaskedWhy};
use crate::outcome::Outcome;
use crate::service::{ApprovalError, ApprovalService};

/// A call an agent CLI ran, as its after-tool hook describes it (tool and arguments in the rule
/// syntax's terms, as the before-tool hook recorded them).
#[derive(Debug, Clone)]
pub struct Ran {
    /// The tool.
    pub tool_name: String,
    /// Its arguments.
    pub arguments: Value,
    /// The CLI's call id, when it gives one (the before-tool hook's `tool_use_id`).
    pub call_id: Option<String>,
}

/// What the after-tool hook found.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// The call's question (this id) let it run.
    Asked {
        /// The question.
        question: String,
        /// Its outcome (`allowed-once`, or `unavailable` when the CLI asked its own user).
        outcome: Outcome,
    },
    /// The call ran unasked: recorded as `approval/unasked`.
    Unasked(Unasked),
}

/// One question of a session, with its call.
struct Question {
    id: String,
    call_id: Option<String>,
    tool_name: String,
    outcome: Option<Outcome>,
    /// Settled only because the process asking it died (`failure.kind = interrupted`): the hook
    /// printed nothing.
    interrupted: bool,
}

/// What a question's record says the hook printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Printed {
    /// An answer that let the call run: allowed once, or nobody decided and the CLI asked.
    LetRun,
    /// A refusal: rejected or cancelled.
    Refused,
    /// Nothing: the question is open, or was settled only because its asker died.
    Nothing,
}

impl Question {
    fn printed(&self) -> Printed {
        match self.outcome {
            None => Printed::Nothing,
            Some(_) if self.interrupted => Printed::Nothing,
            Some(Outcome::Rejected | Outcome::Cancelled) => Printed::Refused,
            Some(Outcome::AllowedOnce | Outcome::Unavailable) => Printed::LetRun,
        }
    }
}

/// A session's questions, their calls' arguments and the calls seen to run, from its records.
struct Questions {
    questions: Vec<Question>,
    arguments: std::collections::HashMap<String, Value>,
    ran: std::collections::HashSet<String>,
}

impl Questions {
    fn of(records: &[Record]) -> Questions {
        let mut questions = Vec::new();
        let mut arguments = std::collections::HashMap::new();
        let mut ran = std::collections::HashSet::new();
        for record in records {
            match &record.event {
                Event::ToolCall(c) => {
                    arguments.insert(c.call_id.clone(), c.arguments.clone());
                }
                Event::Asked(a) => questions.push(Question {
                    id: a.id.clone(),
                    call_id: a.call_id.clone(),
                    tool_name: a.tool_name.clone(),
                    outcome: None,
                    interrupted: false,
                }),
                Event::Decided(d) => {
                    if let Some(q) = questions.iter_mut().rev().find(|q| q.id == d.id) {
                        q.outcome = Some(d.outcome);
                        q.interrupted = d
                            .failure
                            .as_ref()
                            .is_some_and(|f| f.kind == crate::outcome::FailureKind::Interrupted);
                    }
                }
                Event::ToolResult(r) => {
                    ran.insert(r.call_id.clone());
                }
                _ => {}
            }
        }
        Questions {
            questions,
            arguments,
            ran,
        }
    }

    /// The question `ran` answers to: by call id, else the oldest question of the same tool and
    /// arguments whose call has not run yet, one that let it run before one that refused it.
    fn find(&self, ran: &Ran, arguments: &Value) -> Option<&Question> {
        if let Some(id) = &ran.call_id {
            return self
                .questions
                .iter()
                .rev()
                .find(|q| q.call_id.as_deref() == Some(id) && q.tool_name == ran.tool_name);
        }
        let open = |q: &&Question| {
            q.tool_name == ran.tool_name
                && q.call_id.as_ref().is_some_and(|c| {
                    !self.ran.contains(c) && self.arguments.get(c) == Some(arguments)
                })
        };
        let mut candidates = self.questions.iter().filter(open);
        let first = candidates.clone().find(|q| q.printed() == Printed::LetRun);
        first.or_else(|| candidates.next())
    }
}

/// Records that the call `ran` ran in `agent`'s session: a `tool/result` for its question, or
/// `approval/unasked` when it had none or was refused.
///
/// # Errors
/// The session's log could not be read or written.
pub async fn record(
    service: &ApprovalService,
    agent: &Agent,
    ran: &Ran,
) -> Result<Seen, ApprovalError> {
    let session = agent.session();
    let log = &session.log;
    // The arguments as the session's `tool/call` records hold them (redacted alike).
    let arguments = log.redacted(ran.arguments.clone());
    let bytes = service.store().read(log.session())?;
    let records = match &ran.call_id {
        Some(call_id) => from_last_question(log.session(), &bytes, call_id, &ran.tool_name)?,
        None => crate::audit::store::parse_lines(log.session(), &bytes)?,
    };
    let questions = Questions::of(&records);
    let found = questions.find(ran, &arguments);
    let unasked = match found.map(|q| (q, q.printed())) {
        Some((q, Printed::LetRun)) => {
            if let Some(call_id) = &q.call_id {
                log.append(ran_event(call_id)).await?;
            }
            return Ok(Seen::Asked {
                question: q.id.clone(),
                outcome: q.outcome.unwrap_or(Outcome::Unavailable),
            });
        }
        Some((q, printed)) => {
            // The call ran all the same: its question is not matched again.
            if let Some(call_id) = &q.call_id {
                log.append(ran_event(call_id)).await?;
            }
            Unasked {
                tool_name: ran.tool_name.clone(),
                why: if printed == Printed::Refused {
                    UnaskedWhy::Refused
                } else {
                    UnaskedWhy::NotAnswered
                },
                call_id: q.call_id.clone().or_else(|| ran.call_id.clone()),
                question: Some(q.id.clone()),
                arguments: None,
            }
        }
        None => Unasked {
            tool_name: ran.tool_name.clone(),
            why: UnaskedWhy::NotAsked,
            call_id: ran.call_id.clone(),
            question: None,
            arguments: Some(arguments),
        },
    };
    tracing::warn!(
        session = log.session(),
        tool = %unasked.tool_name,
        why = unasked.why.as_str(),
        "a tool call ran that no question allowed"
    );
    let unasked = match log.append(Event::Unasked(unasked.clone())).await {
        Ok(_) => unasked,
        // Arguments too deep for a log line: the alarm is still raised, without them.
        Err(crate::audit::error::LogError::Refused {
            violation: crate::audit::fold::Violation::TooDeep(_),
            ..
        }) if unasked.arguments.is_some() => {
            let bare = Unasked {
                arguments: None,
                ..unasked
            };
            log.append(Event::Unasked(bare.clone())).await?;
            bare
        }
        Err(e) => return Err(e.into()),
    };
    Ok(Seen::Unasked(unasked))
}

/// The records of a session's log (its complete lines, `bytes`) from its last question about
/// call `call_id` of `tool` on, or all of them when it has none: everything a search by call id
/// reads ([`Questions::find`] takes the last such question, and its decision comes after it), so
/// an after-tool hook in a long session parses a few lines from the end rather than the whole log.
///
/// # Errors
/// A line from there on is corrupt (named by its line in the whole log).
fn from_last_question(
    session: &str,
    bytes: &[u8],
    call_id: &str,
    tool: &str,
) -> Result<Vec<Record>, crate::audit::error::LogError> {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if body.is_empty() {
        return Ok(Vec::new());
    }
    let lines: Vec<&[u8]> = body.split(|&b| b == b'\n').collect();
    let mut records = Vec::new();
    for (i, line) in lines.iter().enumerate().rev() {
        let record = crate::audit::store::parse_record(session, line, i + 1)?;
        let found = matches!(&record.event, Event::Asked(a)
            if a.call_id.as_deref() == Some(call_id) && a.tool_name == tool);
        records.push(record);
        if found {
            break;
        }
    }
    records.reverse();
    Ok(records)
}

/// The record that a call ran (its result is not kept).
fn ran_event(call_id: &str) -> Event {
    Event::ToolResult(ToolResult {
        call_id: call_id.to_owned(),
        is_error: false,
        content: Value::Null,
        failed_listener: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::event::{Asked, Decided};

    /// A session's log: call `c1` asked twice (refused, then allowed), other calls around it, one
    /// of them (`c3`) run already.
    fn log() -> Vec<u8> {
        let asked = |id: &str, call: &str, tool: &str| {
            let mut a = Asked::new(id, tool);
            a.call_id = Some(call.to_owned());
            Event::Asked(a)
        };
        let events = [
            Event::TurnStart,
            asked("q1", "c1", "Bash"),
            Event::Decided(Decided::bare("q1", Outcome::Rejected)),
            asked("q2", "c2", "Read"),
            Event::Decided(Decided::bare("q2", Outcome::AllowedOnce)),
            asked("q3", "c1", "Bash"),
            Event::Decided(Decided::bare("q3", Outcome::AllowedOnce)),
            asked("q4", "c1", "Write"),
            asked("q5", "c3", "Bash"),
            Event::Decided(Decided::bare("q5", Outcome::Cancelled)),
            ran_event("c3"),
        ];
        let mut bytes = Vec::new();
        for (i, event) in events.into_iter().enumerate() {
            Record::at(i as u64 + 1, std::time::SystemTime::now(), event).write_line(&mut bytes);
        }
        bytes
    }

    #[test]
    fn the_records_from_the_last_question_find_what_the_whole_log_finds() {
        let bytes = log();
        let all = crate::audit::store::parse_lines("s", &bytes).unwrap();
        let whole = Questions::of(&all);
        for (call, tool, want) in [
            ("c1", "Bash", Some(("q3", Printed::LetRun))),
            ("c1", "Write", Some(("q4", Printed::Nothing))),
            ("c2", "Read", Some(("q2", Printed::LetRun))),
            ("c3", "Bash", Some(("q5", Printed::Refused))),
            ("c1", "Read", None),
            ("c9", "Bash", None),
        ] {
            let ran = Ran {
                tool_name: tool.to_owned(),
                arguments: Value::Null,
                call_id: Some(call.to_owned()),
            };
            let tail = from_last_question("s", &bytes, call, tool).unwrap();
            let found = |q: &Questions| {
                q.find(&ran, &Value::Null)
                    .map(|q| (q.id.clone(), q.printed()))
            };
            let from_tail = found(&Questions::of(&tail));
            assert_eq!(from_tail, found(&whole), "{call} {tool}");
            assert_eq!(
                from_tail,
                want.map(|(id, printed)| (id.to_owned(), printed)),
                "{call} {tool}"
            );
            if want.is_none() {
                assert_eq!(tail.len(), all.len(), "no question: every record read");
            } else {
                assert!(
                    tail.len() < all.len(),
                    "{call} {tool}: read from its question on"
                );
            }
        }
        assert_eq!(from_last_question("s", b"", "c1", "Bash").unwrap().len(), 0);
    }
}
