//! What `verify` checks beyond one log against its checkpoints: a state directory's checkpoint
//! log against its copy (`[audit] checkpoint-copy`), and a log that is gone while its
//! checkpoints remain.

use std::collections::BTreeSet;
use std::io;
use std::path::Path;

use crate::audit::checkpoint::Checkpoint;
use crate::audit::verify::{Problem, Tamper};

/// The sessions (and rules logs) that have a checkpoint log in `dir`; none when `dir` is absent.
pub fn checkpointed_sessions(dir: &Path) -> io::Result<BTreeSet<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(e),
    };
    let mut found = BTreeSet::new();
    for entry in entries {
        let name = entry?.file_name();
        // A name that is not UTF-8 is no session's: session ids are checked ASCII.
        if let Some(session) = name.to_str().and_then(|n| n.strip_suffix(".jsonl"))
            && crate::audit::store::validate_session_id(session).is_ok()
        {
            found.insert(session.to_owned());
        }
    }
    Ok(found)
}

/// The finding for a log that is missing while `where_` still holds its checkpoints.
pub fn deleted(where_: &str) -> Problem {
    Problem {
        line: 1,
        kind: Tamper::Deleted,
        message: format!(
            "the log is missing while its checkpoints remain in {where_}: it was deleted"
        ),
    }
}

/// Compares a session's checkpoint log in the state directory (`local`) with its copy: every
/// checkpoint the host wrote is in both, in the same order. The copy is the one whoever can
/// write the state directory cannot reach, so a difference is reported against the state
/// directory's.
pub fn compare_with_copy(
    local: &[Result<Checkpoint, String>],
    copy: &[Result<Checkpoint, String>],
) -> Option<Problem> {
    let differ = |line: usize, message: String| Problem {
        line: line as u64,
        kind: Tamper::CheckpointsDiffer,
        message,
    };
    for (i, (l, c)) in local.iter().zip(copy).enumerate() {
        if l != c {
            return Some(differ(
                i + 1,
                format!(
                    "checkpoint {} in the state directory differs from the copy's: one of them was rewritten",
                    i + 1
                ),
            ));
        }
    }
    match local.len().cmp(&copy.len()) {
        std::cmp::Ordering::Less => Some(Problem {
            line: local.len() as u64 + 1,
            kind: Tamper::Truncated,
            message: format!(
                "the state directory's checkpoint log ends at checkpoint {} but the copy holds {}: checkpoints were removed",
                local.len(),
                copy.len()
            ),
        }),
        std::cmp::Ordering::Greater => Some(differ(
            copy.len() + 1,
            format!(
                "checkpoint {} in the state directory is missing from the copy: it was not written by this host, or the copy was cut short",
                copy.len() + 1
            ),
        )),
        std::cmp::Ordering::Equal => None,
    }
}
