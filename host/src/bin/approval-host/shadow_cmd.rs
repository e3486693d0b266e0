//! `approval-host shadow report`: what the shadow plugins said on live traffic.

use std::process::ExitCode;

use anyhow::Result;
use approval_host::replay::shadowed;

use crate::{Context, UsageError, wiring};

/// Shadow plugins (`[[plugin]] mode = "shadow"`).
#[derive(clap::Subcommand, Debug)]
pub(crate) enum ShadowCommand {
    /// Each shadow version's agreement with the real decisions, and every disagreement.
    ///
    /// Reads the `approval/shadowed` records of every session in the store (the state
    /// directory, or --store). Exits 0 when every shadow agreed, 1 when one disagreed.
    ///
    /// Example: `approval-host shadow report --since 7d`
    Report {
        /// Only what the shadows said in this last stretch of time (`7d`, `12h`).
        #[arg(long, value_name = "DURATION")]
        since: Option<String>,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `shadow`.
pub(crate) fn run(ctx: &Context, command: ShadowCommand) -> Result<ExitCode> {
    let ShadowCommand::Report { since, json } = command;
    let since = since
        .as_deref()
        .map(|d| {
            humantime::parse_duration(d)
                .map(|d| std::time::SystemTime::now() - d)
                .map_err(|e| UsageError(format!("--since {d:?}: {e}")))
        })
        .transpose()?;
    let store = wiring::open(ctx, None, false)?;
    let report = shadowed::read(&*store, since)?;
    if json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    Ok(ExitCode::from(u8::from(report.any_disagreement())))
}
