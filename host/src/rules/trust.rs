//! Whether a rules log may be trusted before its rules are.
//!
//! Project and user rules live in logs another process may append to (`rules add`, another
//! `serve`), so the rule book rereads them. Whoever can write the file could also append a
//! well-chained `rule/added`, or drop the `rule/revoked` at its end to bring a rule back. Each
//! read is therefore checked as `verify` checks a log: the hash chain from its genesis, `seq`
//! continuity and the writer's rules; with the deployment's signing key, every checkpoint, and
//! that no record lies after the last checkpoint unless this host wrote it itself; and against
//! what this host already read (a log that got shorter, or whose earlier lines changed, was
//! rewritten). A record after the last checkpoint that another host wrote gets a moment for its
//! checkpoint to follow (the writer signs right after it appends) before it counts as tampering.
//!
//! A log that fails is [`Read::Broken`]: the book then applies no allow rule at all (its reject
//! rules still apply) and says so, until the log reads intact again. Rejects survive doubt: a
//! log that is broken or still waits for its checkpoint gives none of its allows, but every
//! reject rule it holds ([`rejects`]), whatever revocations it also holds.

use std::time::{Duration, Instant};

use ed25519_dalek::VerifyingKey;

use crate::audit::chain::{self, Head};
use crate::audit::checkpoint::Checkpoint;
use crate::audit::event::{Event, Record, RuleAdded};
use crate::audit::fold::SessionFold;
use crate::audit::verify::{self, Tamper};

/// How long a record after the last checkpoint, written by another host, waits for its
/// checkpoint before the log counts as tampered with.
pub const CHECKPOINT_GRACE: Duration = Duration::from_secs(2);

/// Where a rules log stood when it was last read intact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The store's size for it ([`crate::audit::store::Store::log_len`]), to reread only on change.
    pub len: Option<u64>,
    /// Its complete records.
    pub records: u64,
    /// The chain value of its last record.
    pub head: Head,
}

/// What reading a rules log found.
#[derive(Debug)]
pub enum Read {
    /// Intact: its active rules, and where it now stands.
    Trusted(Vec<RuleAdded>, Seen),
    /// Its last records wait for their checkpoint: keep what was read before, read it again.
    Waiting,
    /// Not to be trusted, and why.
    Broken(String),
}

/// What a reader of one rules log needs besides its bytes.
pub struct Context<'a> {
    /// The log's name.
    pub name: &'a str,
    /// The store's size for it now.
    pub len: Option<u64>,
    /// The public key and the log's checkpoints, when the deployment signs.
    pub checkpoints: Option<(&'a VerifyingKey, &'a [Result<Checkpoint, String>])>,
    /// Where it stood when last read intact.
    pub seen: Option<Seen>,
    /// The chain value of the last record this host itself appended, if any.
    pub written: Option<Head>,
    /// Since when its last records have waited for a checkpoint, if they have.
    pub waiting_since: Option<Instant>,
}

/// Reads the rules log `bytes` (its complete lines as stored).
pub fn read(bytes: &[u8], cx: &Context<'_>) -> Read {
    let report = match verify::verify_reader_with(bytes, cx.name, cx.checkpoints) {
        Ok(report) => report,
        Err(e) => return Read::Broken(format!("cannot be read: {e}")),
    };
    let lines: Vec<&[u8]> = bytes
        .split_inclusive(|b| *b == b'\n')
        .filter(|l| l.ends_with(b"\n"))
        .map(|l| &l[..l.len() - 1])
        .collect();
    let last_head = lines.last().map(|l| chain::line_hash(l));
    let ours = cx.written.is_some() && cx.written == last_head;
    let in_grace = cx
        .waiting_since
        .is_none_or(|since| since.elapsed() < CHECKPOINT_GRACE);
    if let Some((_, list)) = cx.checkpoints
        && list.is_empty()
        && !lines.is_empty()
        && !ours
    {
        // A deployment that signs checkpoints every rule change: a rules log without one was
        // written without the key, or its checkpoints were removed.
        if in_grace {
            return Read::Waiting;
        }
        return Read::Broken(
            "it has no checkpoint while the deployment signs one after every rule change: its checkpoints were removed, or it was written without the key"
                .to_owned(),
        );
    }
    if let Some(problem) = &report.problem {
        // This host's own last change, still waiting for its checkpoint (the first one, for a
        // log that had none) is not tampering.
        let after_checkpoint = matches!(
            problem.kind,
            Tamper::AddedAfterCheckpoint | Tamper::Unsigned
        );
        if !after_checkpoint || !ours {
            if after_checkpoint && in_grace {
                return Read::Waiting;
            }
            return Read::Broken(format!(
                "line {}: {} ({})",
                problem.line,
                problem.message,
                problem.kind.as_str()
            ));
        }
    }
    if let Some(seen) = cx.seen {
        let records = lines.len() as u64;
        if records < seen.records {
            return Read::Broken(format!(
                "it holds {records} records, fewer than the {} this host read before: records were removed",
                seen.records
            ));
        }
        if seen.records > 0
            && lines
                .get(seen.records as usize - 1)
                .is_none_or(|l| chain::line_hash(l) != seen.head)
        {
            return Read::Broken(format!(
                "line {} is not the line this host read before: the log was rewritten",
                seen.records
            ));
        }
    }
    let mut fold = SessionFold::checking();
    for (i, line) in lines.iter().enumerate() {
        let record = match Record::parse_line(line) {
            Ok(r) => r,
            Err(why) => return Read::Broken(format!("line {}: {why}", i + 1)),
        };
        if !matches!(record.event, Event::RuleAdded(_) | Event::RuleRevoked(_)) {
            return Read::Broken(format!(
                "line {}: a {} event has no place in a rules log",
                i + 1,
                record.event.kind()
            ));
        }
        if let Err(v) = fold.push(record.seq, &record.event) {
            return Read::Broken(format!("line {}: {v}", i + 1));
        }
    }
    Read::Trusted(
        fold.rules().cloned().collect(),
        Seen {
            len: cx.len,
            records: lines.len() as u64,
            head: last_head.unwrap_or_else(|| chain::genesis(cx.name)),
        },
    )
}

/// Every reject rule added in the complete, readable lines of a rules log that is not trusted
/// (broken, or waiting for its checkpoint). Revocations are not honoured: a line appended behind
/// the host's back must not be able to drop a reject.
pub fn rejects(bytes: &[u8]) -> Vec<RuleAdded> {
    bytes
        .split_inclusive(|b| *b == b'\n')
        .filter(|l| l.ends_with(b"\n"))
        .filter_map(|l| Record::parse_line(&l[..l.len() - 1]).ok())
        .filter_map(|r| match r.event {
            Event::RuleAdded(added) if added.effect == crate::answer::Effect::Reject => Some(added),
            _ => None,
        })
        .collect()
}
