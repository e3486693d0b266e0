//! Reading and checking a session log without touching it, for `approval-host log`.
//!
//! The check replays the log through the same fold the writer validates with, then requires
//! every `approval/asked` to have its `approval/decided`. It reports the first problem.

use std::path::Path;

use crate::audit::event::{Event, Record};
use crate::audit::fold::SessionFold;

/// What a clean log holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records read.
    pub records: usize,
    /// Turns started.
    pub turns: usize,
    /// Questions asked (each with its decision).
    pub questions: usize,
}

/// The first thing wrong with a log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct Problem {
    /// The 1-based line it is on.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// A log read for display: the records that parsed, and the first problem, if any.
#[derive(Debug, Clone)]
pub struct Checked {
    /// Records in order, up to the first unreadable line.
    pub records: Vec<Record>,
    /// The summary of what was read.
    pub summary: Summary,
    /// The first problem found.
    pub problem: Option<Problem>,
    /// The problem is only a question still waiting for its decision, in an otherwise sound
    /// log: a fault in a log at rest, the normal state of a session being asked right now.
    pub undecided: bool,
}

/// Reads and checks the log at `path`.
pub fn check_file(path: &Path) -> std::io::Result<Checked> {
    let bytes = std::fs::read(path)?;
    Ok(check_bytes(&bytes))
}

/// Checks the bytes of a log.
pub fn check_bytes(bytes: &[u8]) -> Checked {
    let mut records = Vec::new();
    let mut summary = Summary::default();
    let mut fold = SessionFold::new();
    let mut asked_lines = std::collections::HashMap::new();
    let mut problem = None;
    let mut undecided = false;
    let mut rest = bytes;
    let mut line_no = 0;
    while !rest.is_empty() {
        line_no += 1;
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            problem = Some(Problem {
                line: line_no,
                message: "incomplete line (a torn write; it is truncated when the session is next opened)".to_owned(),
            });
            break;
        };
        let line = &rest[..end];
        rest = &rest[end + 1..];
        let record = match Record::parse_line(line) {
            Ok(r) => r,
            Err(reason) => {
                problem = Some(Problem {
                    line: line_no,
                    message: reason,
                });
                break;
            }
        };
        if record.seq != line_no as u64 {
            problem = Some(Problem {
                line: line_no,
                message: format!("seq {} where {line_no} was expected", record.seq),
            });
            break;
        }
        if let Err(v) = fold.push(record.seq, &record.event) {
            problem = Some(Problem {
                line: line_no,
                message: v.to_string(),
            });
            break;
        }
        match &record.event {
            Event::TurnStart => summary.turns += 1,
            Event::Asked(a) => {
                summary.questions += 1;
                asked_lines.insert(a.id.clone(), line_no);
            }
            _ => {}
        }
        records.push(record);
    }
    summary.records = records.len();
    if problem.is_none()
        && let Some(q) = fold.open_questions().first()
    {
        problem = Some(Problem {
            line: q.seq as usize,
            message: format!("approval/asked {:?} has no approval/decided", q.id),
        });
        undecided = true;
    }
    Checked {
        records,
        summary,
        problem,
        undecided,
    }
}
