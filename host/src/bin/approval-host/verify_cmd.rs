//! `approval-host verify`: session and rules logs checked for tampering (chain, seq, pairing, and
//! with a public key their signed checkpoints).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use approval_host::DirStore;
use approval_host::audit::store::validate_session_id;

use crate::{Context, UsageError};

/// The arguments of `verify`.
#[derive(clap::Args, Debug)]
pub(crate) struct VerifyArgs {
    /// The sessions to check.
    pub(crate) sessions: Vec<String>,
    /// Check every session in the state directory.
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
    /// cannot cut short or remove.
    #[arg(long, value_name = "DIR", requires = "public_key")]
    pub(crate) checkpoints: Option<PathBuf>,
}

/// Runs `verify`.
pub(crate) fn run(ctx: &Context, args: VerifyArgs) -> Result<ExitCode> {
    let state_dir = &ctx.dir;
    let VerifyArgs {
        sessions,
        all,
        json,
        public_key,
        checkpoints,
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
    let checkpoints = checkpoints.unwrap_or_else(|| state_dir.join("checkpoints"));
    verify(ctx, sessions, all, json, key.as_ref(), &checkpoints)
}

fn verify(
    ctx: &crate::Context,
    sessions: Vec<String>,
    all: bool,
    json: bool,
    key: Option<&ed25519_dalek::VerifyingKey>,
    checkpoints_dir: &Path,
) -> Result<ExitCode> {
    let state_dir = ctx.dir.as_path();
    use approval_host::audit::checkpoint::{checkpoints_in, read_checkpoints};
    let store = DirStore::new(state_dir);
    // A database is read whole per session; the directory store streams each file.
    let database = crate::wiring::on_database(ctx, None)
        .then(|| crate::wiring::open(ctx, None, false))
        .transpose()?;
    let sessions = if all {
        match &database {
            Some(db) => db.list()?,
            None => approval_host::Store::list(&store)?,
        }
    } else if sessions.is_empty() {
        return Err(UsageError("name the sessions to verify, or --all".to_owned()).into());
    } else {
        sessions
    };
    let mut tampered = false;
    for session in &sessions {
        validate_session_id(session).map_err(|e| UsageError(e.to_string()))?;
        let path = store.session_path(session);
        let bytes = match &database {
            Some(db) => {
                let bytes = db.read(session)?;
                if bytes.is_empty() {
                    return Err(UsageError(format!("no session log postgres:{session}")).into());
                }
                Some(bytes)
            }
            None if !path.exists() => {
                return Err(UsageError(format!("no session log at {}", path.display())).into());
            }
            None => None,
        };
        let checkpoints_file = checkpoints_in(checkpoints_dir, session);
        let checkpoints = read_checkpoints(&checkpoints_file)
            .with_context(|| format!("reading {}", checkpoints_file.display()))?;
        let against = key.map(|k| (k, checkpoints.as_slice()));
        let mut report = match &bytes {
            Some(bytes) => {
                approval_host::audit::verify::verify_reader_with(&bytes[..], session, against)
            }
            None => approval_host::audit::verify::verify_file_with(&path, session, against),
        }
        .with_context(|| format!("reading {}", path.display()))?;
        let path = match bytes {
            Some(_) => PathBuf::from(format!("postgres:{session}")),
            None => path,
        };
        if key.is_none() && !checkpoints.is_empty() {
            report
                .warnings
                .push(approval_host::audit::verify::CHECKPOINTS_UNCHECKED.to_owned());
        }
        tampered |= !report.intact();
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
    }
    Ok(if tampered {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
