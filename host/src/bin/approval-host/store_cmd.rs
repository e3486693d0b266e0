//! The commands that work on a store as a whole: `log`, `export`, `db migrate`, `db import`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result};
use approval_host::audit::check::check_bytes;
use approval_host::audit::postgres::DbError;
use approval_host::audit::store::{parse_lines, validate_session_id};
use approval_host::{Deployment, DirStore, Store};
use clap::Subcommand;

use crate::wiring::{db_error, on_database, open};
use crate::{Context as Ctx, UsageError};

/// Where the logs are, for messages: the sessions directory or the database.
fn place(ctx: &Ctx) -> String {
    let state_dir = ctx.dir.as_path();
    match ctx.store.as_deref() {
        Some(_) => "the database".to_owned(),
        None => DirStore::new(state_dir)
            .sessions_dir()
            .display()
            .to_string(),
    }
}

fn log_name(ctx: &Ctx, session: &str) -> String {
    let state_dir = ctx.dir.as_path();
    match ctx.store.as_deref() {
        Some(_) => format!("postgres:{session}"),
        None => DirStore::new(state_dir)
            .session_path(session)
            .display()
            .to_string(),
    }
}

/// `log` without a session: one line per session log.
pub(crate) fn list_sessions(ctx: &Ctx) -> Result<ExitCode> {
    let store = open(ctx, None, false)?;
    let mut rows = Vec::new();
    for id in store.list()? {
        let checked = check_bytes(&store.read(&id)?);
        let last = checked
            .records
            .last()
            .map_or_else(|| "-".to_owned(), |r| r.ts.to_string());
        let mut open = false;
        for r in &checked.records {
            match r.event.kind() {
                "turn/start" => open = true,
                "turn/end" => open = false,
                _ => {}
            }
        }
        rows.push((
            id,
            checked.records.len(),
            last,
            open,
            checked.problem.is_some(),
        ));
    }
    if rows.is_empty() {
        println!("no sessions in {}", place(ctx));
        return Ok(ExitCode::SUCCESS);
    }
    // Most recent first.
    rows.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    println!(
        "{:<40} {:>8}  {:<27} turn",
        "session", "records", "last activity"
    );
    for (id, records, last, open, problem) in rows {
        let turn = if open { "open" } else { "-" };
        let flag = if problem {
            "  (fails its check: `log` it)"
        } else {
            ""
        };
        println!("{id:<40} {records:>8}  {last:<27} {turn}{flag}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `log SESSION`: every record, then the check's verdict.
pub(crate) fn print_log(ctx: &Ctx, session: &str) -> Result<ExitCode> {
    let state_dir = ctx.dir.as_path();
    validate_session_id(session).map_err(|e| UsageError(e.to_string()))?;
    let store = open(ctx, None, false)?;
    let name = log_name(ctx, session);
    let bytes = store.read(session)?;
    // An empty database log is no log; an empty file is still one.
    let exists =
        ctx.store.as_deref().is_none() && DirStore::new(state_dir).session_path(session).exists();
    if bytes.is_empty() && !exists {
        return Err(UsageError(format!("no session log at {name}")).into());
    }
    let checked = check_bytes(&bytes);
    for r in &checked.records {
        println!(
            "{:>5}  {}  {:<17} {}",
            r.seq,
            r.ts,
            r.event.kind(),
            r.event.data()
        );
    }
    match checked.problem {
        Some(problem) => {
            eprintln!("approval-host: {name}: {problem}");
            Ok(ExitCode::from(1))
        }
        None => {
            let s = checked.summary;
            println!(
                "ok: {} records, {} turns, {} questions, each decided once inside its turn",
                s.records, s.turns, s.questions
            );
            // Calls that ran without a question that allowed them: the log is sound, the guard
            // was not.
            let alarms: Vec<String> = checked
                .records
                .iter()
                .filter_map(|r| match &r.event {
                    approval_host::event::Event::Unasked(u) => {
                        Some(approval_host::audit::verify::unasked_alarm(r.seq, u))
                    }
                    _ => None,
                })
                .collect();
            for alarm in &alarms {
                println!("UNASKED: {alarm}");
            }
            Ok(if alarms.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            })
        }
    }
}

/// `export`: records as JSON lines on stdout, each `{"session": ..., "record": <the stored
/// line, byte for byte>}`, sessions in name order, records in seq order.
pub(crate) fn export(ctx: &Ctx, sessions: Vec<String>, since: Option<String>) -> Result<ExitCode> {
    use std::io::Write;
    let since = since
        .map(|s| {
            humantime::parse_rfc3339_weak(&s)
                .map_err(|e| UsageError(format!("--since {s:?}: {e} (e.g. 2026-12-01T00:00:00Z)")))
        })
        .transpose()?;
    for s in &sessions {
        validate_session_id(s).map_err(|e| UsageError(e.to_string()))?;
    }
    let store = open(ctx, None, false)?;
    let sessions = if sessions.is_empty() {
        store.list()?
    } else {
        sessions
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for session in sessions {
        let bytes = store.read(&session)?;
        let name = log_name(ctx, &session);
        let records = parse_lines(&name, &bytes)?;
        let session_json = serde_json::to_string(&session)?;
        for (line, record) in bytes
            .strip_suffix(b"\n")
            .unwrap_or(&bytes)
            .split(|&b| b == b'\n')
            .zip(&records)
        {
            if let Some(since) = since
                && !at_or_after(&record.ts, since)
            {
                continue;
            }
            out.write_all(b"{\"session\":")?;
            out.write_all(session_json.as_bytes())?;
            out.write_all(b",\"record\":")?;
            out.write_all(line)?;
            out.write_all(b"}\n")?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn at_or_after(ts: &str, since: SystemTime) -> bool {
    humantime::parse_rfc3339_weak(ts).is_ok_and(|t| t >= since)
}

/// `approval-host db ...`.
#[derive(Subcommand, Debug)]
pub(crate) enum DbCommand {
    /// Create the database schema, or bring it to this host's version.
    ///
    /// Each step runs in its own transaction; running it again, or from several hosts at once,
    /// is safe. Prints the versions before and after.
    ///
    /// Example: `APPROVAL_HOST_DB_PASSWORD=... approval-host --store postgres://approvals@db/approvals db migrate`
    Migrate {
        /// The deployment file whose `[store]` names the database (or give --store).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Copy a state directory's session and rules logs into the database.
    ///
    /// Idempotent: a log already copied is skipped, one copied in part is completed, and one
    /// whose stored lines differ from the directory's is refused (exit 1, naming it). A session
    /// open on a host is waited for no more than its lease.
    ///
    /// Example: `approval-host --store postgres://approvals@db/approvals db import ~/.approval-host`
    Import {
        /// The state directory to copy from.
        dir: PathBuf,
        /// The deployment file whose `[store]` names the database (or give --store).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

fn no_database() -> anyhow::Error {
    UsageError(
        "no database: give --store postgres://... or a deployment (--config) with [store] url"
            .to_owned(),
    )
    .into()
}

fn database(ctx: &Ctx, config: Option<&Path>, migrate: bool) -> Result<Arc<dyn Store>> {
    let deployment = config.map(Deployment::load).transpose()?;
    if !on_database(ctx, deployment.as_ref()) {
        return Err(no_database());
    }
    open(ctx, deployment.as_ref(), migrate)
}

pub(crate) fn db(ctx: &Ctx, command: DbCommand) -> Result<ExitCode> {
    match command {
        DbCommand::Migrate { config } => {
            let deployment = config.as_deref().map(Deployment::load).transpose()?;
            let Some(mut options) =
                approval_host::config::store::options(deployment.as_ref(), ctx.store.as_deref())
                    .map_err(db_error)?
            else {
                return Err(no_database());
            };
            // Connect without migrating first, to report where the schema started.
            options.migrate = false;
            let before = match approval_host::PgStore::connect(options.clone()) {
                Ok(store) => {
                    println!(
                        "schema at version {}: up to date",
                        store.schema_version().map_err(db_error)?
                    );
                    return Ok(ExitCode::SUCCESS);
                }
                Err(DbError::SchemaBehind { found, .. }) => found,
                Err(e) => return Err(db_error(e)),
            };
            options.migrate = true;
            let store = approval_host::PgStore::connect(options).map_err(db_error)?;
            let after = store.schema_version().map_err(db_error)?;
            println!("schema migrated from version {before} to {after}");
            Ok(ExitCode::SUCCESS)
        }
        DbCommand::Import { dir, config } => {
            let target = database(ctx, config.as_deref(), false)?;
            import(&dir, &*target)
        }
    }
}

/// Copies every log of the directory store at `dir` into `target`.
fn import(dir: &Path, target: &dyn Store) -> Result<ExitCode> {
    let source = DirStore::new(dir);
    if !source.sessions_dir().is_dir() {
        return Err(UsageError(format!(
            "{}: no sessions directory (is it a state directory?)",
            source.sessions_dir().display()
        ))
        .into());
    }
    let (mut copied, mut complete, mut refused) = (0, 0, 0);
    for session in source.list()? {
        let path = source.session_path(&session);
        let bytes = source.read(&session)?;
        // Refuse a log that does not read back: nothing of it is copied.
        parse_lines(&path.display().to_string(), &bytes)?;
        let lines: Vec<&[u8]> = match bytes.strip_suffix(b"\n") {
            Some(body) => body.split(|&b| b == b'\n').collect(),
            None => Vec::new(),
        };
        let opened = open_patiently(target, &session)?;
        // Read under the lease: nobody appends between this read and the copy.
        let stored = target.read(&session)?;
        let stored: Vec<&[u8]> = match stored.strip_suffix(b"\n") {
            Some(body) => body.split(|&b| b == b'\n').collect(),
            None => Vec::new(),
        };
        if stored.len() > lines.len() || stored.iter().zip(&lines).any(|(a, b)| a != b) {
            eprintln!(
                "approval-host: {session}: the database's log differs from {}; not copied",
                path.display()
            );
            refused += 1;
            continue;
        }
        if stored.len() == lines.len() {
            complete += 1;
            continue;
        }
        let mut rest = Vec::new();
        for line in &lines[stored.len()..] {
            rest.extend_from_slice(line);
            rest.push(b'\n');
        }
        let mut journal = opened.journal;
        journal
            .append(&rest)
            .with_context(|| format!("copying {}", path.display()))?;
        copied += 1;
        println!(
            "{session}: {} records copied{}",
            lines.len() - stored.len(),
            if stored.is_empty() {
                String::new()
            } else {
                format!(" (after {} already there)", stored.len())
            }
        );
    }
    println!("{copied} logs copied, {complete} already complete, {refused} refused");
    Ok(if refused > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Opens a log for writing, waiting (up to a minute: longer than any lease) while a host holds
/// it.
fn open_patiently(store: &dyn Store, session: &str) -> Result<approval_host::OpenedLog> {
    let started = std::time::Instant::now();
    loop {
        match store.open(session) {
            Err(approval_host::LogError::Locked { .. })
                if started.elapsed() < std::time::Duration::from_secs(60) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            other => return Ok(other?),
        }
    }
}

/// The arguments of `log`.
#[derive(clap::Args, Debug)]
pub(crate) struct LogArgs {
    /// The session id.
    pub(crate) session: Option<String>,
}

/// The arguments of `export`.
#[derive(clap::Args, Debug)]
pub(crate) struct ExportArgs {
    /// Only these sessions (every session and rules log when none is named).
    #[arg(long = "session", value_name = "S")]
    pub(crate) sessions: Vec<String>,
    /// Only records at or after this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub(crate) since: Option<String>,
}
