//! `approval-host verify`: session and rules logs checked for tampering (chain, seq, pairing, and
//! with a public key their signed checkpoints).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use approval_host::DirStore;
use approval_host::audit::store::validate_session_id;
use approval_host::audit::verify::{self, Problem, Report, Tamper};

use crate::{Context, UsageError};

/// The arguments of `verify`.
#[derive(clap::Args, Debug)]
pub(crate) struct VerifyArgs {
    /// The sessions to check.
    pub(crate) sessions: Vec<String>,
    /// Check every session in the state directory (and every one a checkpoint log names).
    #[arg(long, conflicts_with = "sessions")]
    pub(crate) all: bool,
    /// One JSON object per session instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// The public key of the deployment's `[audit] signing-key` (`KEY.pub`, written by
    /// `keygen`): also check each log against its signed checkpoints, which finds a log cut
    /// short, replaced whole, or extended after its last checkpoint.
    #[arg(long, value_name = "FILE")]
    pub(crate) public_key: Option<PathBuf>,
    /// Read checkpoint logs from DIR (the deployment's `[audit] checkpoint-copy`) instead
    /// of the state directory's `checkpoints/`: a copy whoever can write the state directory
    /// cannot cut short or remove. The state directory's own are compared with it.
    #[arg(long, value_name = "DIR", requires = "public_key")]
    pub(crate) checkpoints: Option<PathBuf>,
    /// Logs with no checkpoint at all were written while the deployment had no signing key:
    /// report them as a warning, not as `unsigned`.
    #[arg(long, requires = "public_key")]
    pub(crate) allow_unsigned: bool,
}

/// The exit status when every log is intact but one records a call that ran unasked.
const UNASKED_EXIT: u8 = 3;

/// Where checkpoints are read from, and how strictly.
struct Checking<'a> {
    key: Option<&'a ed25519_dalek::VerifyingKey>,
    /// The state directory's `checkpoints/`.
    local: PathBuf,
    /// `--checkpoints DIR`: the copy, which the logs are checked against.
    copy: Option<PathBuf>,
    allow_unsigned: bool,
}

/// Runs `verify`.
pub(crate) fn run(ctx: &Context, args: VerifyArgs) -> Result<ExitCode> {
    let VerifyArgs {
        sessions,
        all,
        json,
        public_key,
        checkpoints,
        allow_unsigned,
    } = args;
    let key = public_key
        .map(|p| approval_host::audit::checkpoint::load_public_key(&p))
        .transpose()
        .map_err(|e| UsageError(format!("--public-key {e}")))?;
    if let Some(dir) = &checkpoints
        && !dir.is_dir()
    {
        return Err(UsageError(format!("--checkpoints {}: not a directory", dir.display())).into());
    }
    let checking = Checking {
        key: key.as_ref(),
        local: ctx.dir.join("checkpoints"),
        copy: checkpoints,
        allow_unsigned,
    };
    verify(ctx, sessions, all, json, &checking)
}

fn verify(
    ctx: &crate::Context,
    sessions: Vec<String>,
    all: bool,
    json: bool,
    checking: &Checking<'_>,
) -> Result<ExitCode> {
    use approval_host::audit::evidence::checkpointed_sessions;
    let store = DirStore::new(&ctx.dir);
    // A database is read whole per session; the directory store streams each file.
    let database = crate::wiring::on_database(ctx, None)
        .then(|| crate::wiring::open(ctx, None, false))
        .transpose()?;
    let sessions: Vec<String> = if all {
        let mut every: BTreeSet<String> = match &database {
            Some(db) => db.list()?,
            None => approval_host::Store::list(&store)?,
        }
        .into_iter()
        .collect();
        // A log that was deleted is still named by its checkpoints, here or in the copy.
        for dir in std::iter::once(&checking.local).chain(&checking.copy) {
            every.extend(
                checkpointed_sessions(dir).with_context(|| format!("reading {}", dir.display()))?,
            );
        }
        every.into_iter().collect()
    } else if sessions.is_empty() {
        return Err(UsageError("name the sessions to verify, or --all".to_owned()).into());
    } else {
        sessions
    };
    let mut tampered = false;
    let mut unasked = false;
    for session in &sessions {
        validate_session_id(session).map_err(|e| UsageError(e.to_string()))?;
        let (path, mut report) = check(&store, database.as_deref(), session, checking)?;
        if report.problem.as_ref().map(|p| p.kind) == Some(Tamper::Unsigned)
            && checking.allow_unsigned
        {
            report.problem = None;
            report.warnings.push(verify::NO_CHECKPOINTS.to_owned());
        }
        tampered |= !report.intact();
        unasked |= !report.alarms.is_empty();
        if json {
            let mut value = serde_json::to_value(&report)?;
            value["intact"] = report.intact().into();
            value["path"] = path.display().to_string().into();
            println!("{value}");
            continue;
        }
        match &report.problem {
            None if report.records == 0 => println!("{session}: intact, empty"),
            None => println!(
                "{session}: intact, {} records{}",
                report.records,
                match report.chained_from {
                    Some(1) => ", chained".to_owned(),
                    Some(seq) => format!(", chained from seq {seq}"),
                    None => ", unchained".to_owned(),
                }
            ),
            Some(p) => println!(
                "{session}: TAMPERED at line {} ({}): {} [{}]",
                p.line,
                p.kind.as_str(),
                p.message,
                path.display()
            ),
        }
        for w in &report.warnings {
            println!("{session}: warning: {w}");
        }
        for a in &report.alarms {
            println!("{session}: UNASKED: {a}");
        }
    }
    Ok(if tampered {
        ExitCode::from(1)
    } else if unasked {
        ExitCode::from(UNASKED_EXIT)
    } else {
        ExitCode::SUCCESS
    })
}

/// Checks one session: its log (from the database or the state directory) against its
/// checkpoints, the state directory's checkpoints against the copy, and whether a log that is
/// gone left checkpoints behind. What cannot be read is a finding about that file, never an
/// abort of the run.
fn check(
    store: &DirStore,
    database: Option<&dyn approval_host::Store>,
    session: &str,
    checking: &Checking<'_>,
) -> Result<(PathBuf, Report)> {
    use approval_host::audit::checkpoint::{checkpoints_in, read_checkpoints};
    use approval_host::audit::evidence;
    let unreadable = |what: &Path, e: &dyn std::fmt::Display| Problem {
        line: 1,
        kind: Tamper::Unreadable,
        message: format!("{} cannot be read: {e}", what.display()),
    };
    let empty = |problem: Problem| Report {
        session: session.to_owned(),
        records: 0,
        chained_from: None,
        warnings: Vec::new(),
        alarms: Vec::new(),
        problem: Some(problem),
    };
    let file = store.session_path(session);
    // The log, when there is one: read whole from a database, streamed from a file.
    enum Log {
        Read(Vec<u8>),
        File,
    }
    let (path, log) = match database {
        Some(db) => {
            let path = PathBuf::from(format!("postgres:{session}"));
            match db.read(session) {
                Ok(bytes) => (path, (!bytes.is_empty()).then_some(Log::Read(bytes))),
                Err(e) => return Ok((path.clone(), empty(unreadable(&path, &e)))),
            }
        }
        None => (file.clone(), file.exists().then_some(Log::File)),
    };
    let local_file = checkpoints_in(&checking.local, session);
    let copy_file = checking.copy.as_ref().map(|d| checkpoints_in(d, session));
    let Some(log) = log else {
        let left = std::iter::once(&local_file)
            .chain(&copy_file)
            .find(|f| f.exists());
        return match left {
            Some(f) => Ok((path, empty(evidence::deleted(&f.display().to_string())))),
            None => Err(UsageError(match database {
                Some(_) => format!("no session log postgres:{session}"),
                None => format!("no session log at {}", file.display()),
            })
            .into()),
        };
    };
    let local = match read_checkpoints(&local_file) {
        Ok(list) => list,
        Err(e) => return Ok((path, empty(unreadable(&local_file, &e)))),
    };
    let copy = match &copy_file {
        Some(f) => match read_checkpoints(f) {
            Ok(list) => Some(list),
            Err(e) => return Ok((path, empty(unreadable(f, &e)))),
        },
        None => None,
    };
    let against = checking.key.map(|k| (k, copy.as_deref().unwrap_or(&local)));
    let verified = match &log {
        Log::Read(bytes) => verify::verify_reader_with(&bytes[..], session, against),
        Log::File => verify::verify_file_with(&file, session, against),
    };
    let mut report = match verified {
        Ok(report) => report,
        Err(e) => return Ok((path.clone(), empty(unreadable(&path, &e)))),
    };
    if report.problem.is_none()
        && checking.key.is_some()
        && let Some(copy) = &copy
        && let Some(problem) = evidence::compare_with_copy(&local, copy)
    {
        report.problem = Some(problem);
    }
    if checking.key.is_none() && !local.is_empty() {
        report
            .warnings
            .push(verify::CHECKPOINTS_UNCHECKED.to_owned());
    }
    Ok((path, report))
}
