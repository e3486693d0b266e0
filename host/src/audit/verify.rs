//! Checking that a session log is what the host wrote, for `approval-host verify`.
//!
//! A log is read as a stream, one line at a time (memory grows with the questions of the session,
//! not with the size of the file), and each line must: parse as a record; carry the next `seq`;
//! commit, through its `prev`, to the exact bytes of the line before it (the first line to the
//! session's genesis); and pass the same fold rules the writer enforces (turns, every question
//! decided once inside its turn). The first line that fails is reported with what is wrong.
//!
//! Not tampering, reported as warnings: lines written before chaining (an unchained prefix), a torn
//! last line (a crash mid-write, never reported durable; the next open truncates it), and a turn
//! still open at the end (a live session, or a crash whose open questions the next open settles).

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use serde::Serialize;

use std::collections::BTreeMap;

use ed25519_dalek::VerifyingKey;

use crate::audit::chain::{self, Head};
use crate::audit::checkpoint::Checkpoint;
use crate::audit::event::Record;
use crate::audit::fold::SessionFold;

/// What is wrong at the first bad line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tamper {
    /// The line is not a record.
    Unreadable,
    /// The line's `prev` is not the line before it: that line was changed, or lines were
    /// removed, reordered or inserted here.
    ChainBroken,
    /// The first chained line does not commit to this session's genesis: the log was replaced or
    /// belongs to another session.
    WrongGenesis,
    /// A `seq` is missing: records were removed before this line.
    Missing,
    /// A `seq` repeats or goes back: records were reordered or added.
    Reordered,
    /// An unchained line after chained ones: added or rewritten by something other than the host.
    Unchained,
    /// The record breaks a rule the writer enforces (a decided without its asked, an event
    /// outside its turn...).
    Inconsistent,
    /// A checkpoint does not parse, is not signed by the key, or names another session.
    CheckpointInvalid,
    /// The line at a checkpoint's seq is not the line checkpointed: the log was rewritten or
    /// replaced (records changed or missing before a checkpoint).
    Rewritten,
    /// The log is shorter than its last checkpoint: records were removed from its end.
    Truncated,
    /// A turn ended (in a rules log: any record) after the last checkpoint: the host checkpoints
    /// every turn's end and every rule change, so those records were added after it (or the
    /// host crashed in the moment between the two).
    AddedAfterCheckpoint,
    /// Checked with a public key, a log with records has no checkpoint at all: its checkpoint
    /// log was removed, or it was written without the key (`verify --allow-unsigned` says so).
    Unsigned,
    /// The log is gone while its checkpoints remain (here, or in the copy).
    Deleted,
    /// The state directory's checkpoint log and its copy disagree: a checkpoint in one is
    /// missing from, or different in, the other.
    CheckpointsDiffer,
}

impl Tamper {
    /// The kebab-case name, as `--json` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Tamper::Unreadable => "unreadable",
            Tamper::ChainBroken => "chain-broken",
            Tamper::WrongGenesis => "wrong-genesis",
            Tamper::Missing => "missing",
            Tamper::Reordered => "reordered",
            Tamper::Unchained => "unchained",
            Tamper::Inconsistent => "inconsistent",
            Tamper::CheckpointInvalid => "checkpoint-invalid",
            Tamper::Rewritten => "rewritten",
            Tamper::Truncated => "truncated",
            Tamper::AddedAfterCheckpoint => "added-after-checkpoint",
            Tamper::Unsigned => "unsigned",
            Tamper::Deleted => "deleted",
            Tamper::CheckpointsDiffer => "checkpoints-differ",
        }
    }
}

/// The first bad line of a log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Its 1-based line number.
    pub line: u64,
    /// What is wrong.
    pub kind: Tamper,
    /// In words.
    pub message: String,
}

/// What verifying one log found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The session.
    pub session: String,
    /// Complete records read (up to the first problem).
    pub records: u64,
    /// The seq of the first chained record; `None` when no line is chained.
    pub chained_from: Option<u64>,
    /// Findings that are not tampering.
    pub warnings: Vec<String>,
    /// Calls the log records as run although no question allowed them (`approval/unasked`): the
    /// agent CLI's guard stopped gating. Not tampering, but never to be passed over.
    pub alarms: Vec<String>,
    /// The first problem; `None` when the log is intact.
    pub problem: Option<Problem>,
}

impl Report {
    /// Whether nothing was found that the host would not have written.
    pub fn intact(&self) -> bool {
        self.problem.is_none()
    }
}

/// The warning for a log whose first lines predate chaining.
pub fn unchained_prefix(last: u64) -> String {
    format!(
        "lines 1 to {last} are unchained (written before logs were chained): they are checked for order and pairing only"
    )
}

/// The warning for a torn last line.
pub const TORN_TAIL: &str = "the last line is torn (a crash mid-write; it was never reported durable and the next open truncates it)";

/// The warning for a log that ends inside a turn.
pub const TURN_OPEN: &str = "the last turn is still open (a live session, or a crash: the next open settles its open questions unavailable)";

/// The warning when checkpoints exist but no public key was given to check them with.
pub const CHECKPOINTS_UNCHECKED: &str = "this log has signed checkpoints, not checked: pass --public-key to find a log cut short, replaced or extended";

/// The warning for a log with no checkpoint at all, when `--allow-unsigned` says the deployment
/// had no signing key when it was written.
pub const NO_CHECKPOINTS: &str =
    "this log has no checkpoint (written without a signing key, as --allow-unsigned says)";

/// Why a log with records and no checkpoint is a finding when checked with a public key.
pub const UNSIGNED: &str = "the log has records and no checkpoint: its checkpoint log was removed, or it was written without the signing key (pass --allow-unsigned if the deployment had none then)";

/// The warning for records after the last checkpoint inside an open turn.
pub fn uncovered(records: u64) -> String {
    format!(
        "{records} records after the last checkpoint are not yet covered by a signature (a turn still open)"
    )
}

/// The alarm for an `approval/unasked` record at `seq`.
pub fn unasked_alarm(seq: u64, unasked: &crate::audit::event::Unasked) -> String {
    use crate::audit::event::UnaskedWhy;
    let call = unasked
        .call_id
        .as_deref()
        .map(|c| format!(" (call {c})"))
        .unwrap_or_default();
    match unasked.why {
        UnaskedWhy::NotAsked => format!(
            "seq {seq}: {}{call} ran without being asked: its before-tool hook failed, timed out or was skipped",
            unasked.tool_name
        ),
        UnaskedWhy::Refused => format!(
            "seq {seq}: {}{call} ran although question {} refused it",
            unasked.tool_name,
            unasked.question.as_deref().unwrap_or("?")
        ),
        UnaskedWhy::NotAnswered => format!(
            "seq {seq}: {}{call} ran although question {} was never answered: its hook stopped before it could",
            unasked.tool_name,
            unasked.question.as_deref().unwrap_or("?")
        ),
    }
}

/// The trusted public key and a session's checkpoint log (each line parsed, or why not).
pub type Checkpoints<'a> = (&'a VerifyingKey, &'a [Result<Checkpoint, String>]);

/// Verifies the log of `session` at `path`.
pub fn verify_file(path: &Path, session: &str) -> io::Result<Report> {
    verify_file_with(path, session, None)
}

/// Verifies the log of `session` at `path` and, with a public key, against its checkpoints.
pub fn verify_file_with(
    path: &Path,
    session: &str,
    checkpoints: Option<Checkpoints<'_>>,
) -> io::Result<Report> {
    let file = File::open(path)?;
    verify_reader_with(
        BufReader::with_capacity(1 << 20, file),
        session,
        checkpoints,
    )
}

/// Verifies a log read from `reader`.
pub fn verify_reader(reader: impl BufRead, session: &str) -> io::Result<Report> {
    verify_reader_with(reader, session, None)
}

/// Verifies a log read from `reader`, and against its checkpoints when given.
pub fn verify_reader_with(
    mut reader: impl BufRead,
    session: &str,
    checkpoints: Option<Checkpoints<'_>>,
) -> io::Result<Report> {
    let mut report = Report {
        session: session.to_owned(),
        records: 0,
        chained_from: None,
        warnings: Vec::new(),
        alarms: Vec::new(),
        problem: None,
    };
    let mut fold = SessionFold::checking();
    let mut line = Vec::with_capacity(512);
    // The chain value of the line before (the genesis before the first line).
    let mut before: Head = chain::genesis(session);
    let mut line_no = 0u64;
    let fail = |report: &mut Report, line: u64, kind: Tamper, message: String| {
        report.problem = Some(Problem {
            line,
            kind,
            message,
        });
    };
    // The checkpointed chain values by seq, once each checkpoint is shown to be genuine.
    let mut signed: BTreeMap<u64, String> = BTreeMap::new();
    if let Some((key, list)) = checkpoints {
        // What the next chained checkpoint must commit to, and whether one has been seen.
        let mut link = crate::audit::checkpoint::first_link(session);
        let mut chained = false;
        for (i, c) in list.iter().enumerate() {
            let why = match c {
                Err(why) => Some((0, format!("checkpoint {} does not parse: {why}", i + 1))),
                Ok(c) if !c.verify(key) => Some((
                    c.seq,
                    format!(
                        "checkpoint {} (seq {}) is not signed by this key",
                        i + 1,
                        c.seq
                    ),
                )),
                Ok(c) if c.session != session => Some((
                    c.seq,
                    format!(
                        "checkpoint {} is of session {:?}: replayed from another session",
                        i + 1,
                        c.session
                    ),
                )),
                Ok(c) => match (c.n, &c.prev) {
                    (Some(n), Some(prev)) if n != i as u64 + 1 || *prev != link => Some((
                        c.seq,
                        format!(
                            "checkpoint {} does not follow the one before it: checkpoints were removed, reordered or inserted",
                            i + 1
                        ),
                    )),
                    (None, _) | (_, None) if chained => Some((
                        c.seq,
                        format!(
                            "checkpoint {} is unchained after chained ones: it was not written by this host",
                            i + 1
                        ),
                    )),
                    (n, _) => {
                        chained |= n.is_some();
                        link = c.link();
                        signed.insert(c.seq, c.head.clone());
                        None
                    }
                },
            };
            if let Some((line, message)) = why {
                fail(&mut report, line, Tamper::CheckpointInvalid, message);
                return Ok(report);
            }
        }
    }
    let last_signed = signed.keys().next_back().copied().unwrap_or(0);
    // The host checkpoints a rules log after every record (each is a rule added or revoked), so
    // there every record must be covered, as a session's turn ends are.
    let rules_log = crate::audit::store::is_ledger(session);
    // Turn ends (in a rules log: records) after the last checkpoint.
    let mut unsigned_turn_ends: Vec<u64> = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        line_no += 1;
        if line.last() != Some(&b'\n') {
            report.warnings.push(TORN_TAIL.to_owned());
            break;
        }
        let bytes = &line[..line.len() - 1];
        let (record, prev) = match Record::parse_linked(bytes) {
            Ok(parsed) => parsed,
            Err(why) => {
                fail(
                    &mut report,
                    line_no,
                    Tamper::Unreadable,
                    format!("not a record: {why}"),
                );
                return Ok(report);
            }
        };
        let expected = report.records + 1;
        if record.seq != expected {
            let (kind, message) = if record.seq > expected {
                (
                    Tamper::Missing,
                    format!(
                        "seq {} where {expected} was expected: records were removed",
                        record.seq
                    ),
                )
            } else {
                (
                    Tamper::Reordered,
                    format!(
                        "seq {} where {expected} was expected: records were reordered or added",
                        record.seq
                    ),
                )
            };
            fail(&mut report, line_no, kind, message);
            return Ok(report);
        }
        match (prev, report.chained_from) {
            (Some(prev), _) => {
                if !chain::hex_is(&prev, &before) {
                    let (kind, message) = if line_no == 1 {
                        (
                            Tamper::WrongGenesis,
                            format!(
                                "the first line does not commit to session {session:?}: the log was replaced, or belongs to another session"
                            ),
                        )
                    } else {
                        (
                            Tamper::ChainBroken,
                            format!(
                                "prev does not match line {}: that line was changed, or lines were removed, reordered or inserted here",
                                line_no - 1
                            ),
                        )
                    };
                    fail(&mut report, line_no, kind, message);
                    return Ok(report);
                }
                if report.chained_from.is_none() {
                    report.chained_from = Some(record.seq);
                    if line_no > 1 {
                        report.warnings.push(unchained_prefix(line_no - 1));
                    }
                }
            }
            (None, Some(_)) => {
                fail(
                    &mut report,
                    line_no,
                    Tamper::Unchained,
                    "an unchained line after chained ones: it was not written by this host's writer".to_owned(),
                );
                return Ok(report);
            }
            (None, None) => {}
        }
        if let Err(violation) = fold.push(record.seq, &record.event) {
            fail(
                &mut report,
                line_no,
                Tamper::Inconsistent,
                violation.to_string(),
            );
            return Ok(report);
        }
        if let crate::audit::event::Event::Unasked(unasked) = &record.event {
            report.alarms.push(unasked_alarm(record.seq, unasked));
        }
        before = chain::line_hash(bytes);
        if let Some(head) = signed.get(&record.seq)
            && !chain::hex_is(head, &before)
        {
            fail(
                &mut report,
                line_no,
                Tamper::Rewritten,
                format!(
                    "this is not the line checkpointed at seq {}: the log was rewritten or replaced",
                    record.seq
                ),
            );
            return Ok(report);
        }
        if checkpoints.is_some()
            && record.seq > last_signed
            && (rules_log || record.event.ends_turn())
        {
            unsigned_turn_ends.push(record.seq);
        }
        report.records += 1;
    }
    if checkpoints.is_some() {
        let records = report.records;
        if records < last_signed {
            fail(
                &mut report,
                records + 1,
                Tamper::Truncated,
                format!(
                    "the log ends at seq {records} but was checkpointed at seq {last_signed}: records were removed"
                ),
            );
            return Ok(report);
        }
        // The host checkpoints each turn's end before its `end_turn` returns.
        if signed.is_empty() {
            // The host checkpoints every turn's end (every rule change): only a first turn still
            // open may have none yet.
            if !unsigned_turn_ends.is_empty() {
                fail(&mut report, 1, Tamper::Unsigned, UNSIGNED.to_owned());
                return Ok(report);
            }
            if records > 0 {
                report.warnings.push(uncovered(records));
            }
        } else if let Some(&end) = unsigned_turn_ends.first() {
            let what = if session.starts_with(crate::audit::store::RULES_LOG_PREFIX) {
                format!("the rule change at seq {end} has no checkpoint")
            } else if rules_log {
                format!("the record at seq {end} has no checkpoint")
            } else {
                format!("the turn that ends at seq {end} has no checkpoint")
            };
            fail(
                &mut report,
                last_signed + 1,
                Tamper::AddedAfterCheckpoint,
                format!(
                    "{what}: records were added after the last checkpoint (seq {last_signed}), or the host crashed between writing it and its checkpoint"
                ),
            );
            return Ok(report);
        } else if records > last_signed {
            report.warnings.push(uncovered(records - last_signed));
        }
    }
    if report.chained_from.is_none() && report.records > 0 {
        report.warnings.push(unchained_prefix(report.records));
    }
    if fold.turn_open() {
        report.warnings.push(TURN_OPEN.to_owned());
    }
    Ok(report)
}
