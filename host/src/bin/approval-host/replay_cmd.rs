//! `approval-host replay`: the recorded questions asked again of another deployment, the
//! differences printed, and an exit status a CI job can gate a policy change on.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use approval_host::Deployment;
use approval_host::replay::{self, ReplayError, ReplayOptions, Sessions};

use crate::{Context, UsageError, wiring};

/// The arguments of `replay`.
#[derive(clap::Args, Debug)]
pub(crate) struct ReplayArgs {
    /// The deployment to try: its rules, plugins and default policy decide the recorded
    /// questions again.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: PathBuf,
    /// Replay this session (repeatable).
    #[arg(long = "session", value_name = "S", required_unless_present = "all")]
    pub(crate) sessions: Vec<String>,
    /// Replay every session in the store.
    #[arg(long, conflicts_with = "sessions")]
    pub(crate) all: bool,
    /// Only the questions asked in this last stretch of time (`7d`, `12h`); earlier events still
    /// shape the session.
    #[arg(long, value_name = "DURATION")]
    pub(crate) since: Option<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Exit status when the replay could not run at all (2 is bad input; 0, 1 and 3 are results).
const EXIT_FAILED: u8 = 4;

/// Runs `replay`: exits 0 when nothing changed, 1 when a question changed, 3 when one that was
/// not allowed without a person would now be allowed.
pub(crate) fn run(ctx: &Context, args: ReplayArgs) -> Result<ExitCode> {
    let since = args
        .since
        .as_deref()
        .map(|d| {
            humantime::parse_duration(d)
                .map(|d| std::time::SystemTime::now() - d)
                .map_err(|e| UsageError(format!("--since {d:?}: {e}")))
        })
        .transpose()?;
    let deployment = Deployment::load(&args.config)?;
    let store = wiring::open(ctx, Some(&deployment), false)?;
    let host = wiring::cached_host(&ctx.dir, ctx.quiet)?;
    let options = ReplayOptions {
        sessions: if args.all {
            Sessions::All
        } else {
            Sessions::Named(args.sessions)
        },
        since,
        workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
        state_dir: ctx.dir.clone(),
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let report = match runtime.block_on(replay::run(store, &deployment, &host, options)) {
        Ok(report) => report,
        Err(ReplayError::NoSuchSession(s)) => {
            return Err(UsageError(format!("no session {s:?} in the store")).into());
        }
        Err(ReplayError::Assemble(e)) => return Err(wiring::assemble_error(e)),
        Err(e) => {
            eprintln!("approval-host: replay: {e}");
            return Ok(ExitCode::from(EXIT_FAILED));
        }
    };
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    Ok(ExitCode::from(report.exit_code()))
}
