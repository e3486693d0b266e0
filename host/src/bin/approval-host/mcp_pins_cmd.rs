//! `approval-host mcp pins`: the MCP gateway's pinned tool definitions
//! ([`approval_host::mcp::pins`]), listed with what waits for a person shown as a diff, and
//! approved from the command line (recorded as `mcp/pinned` by `cli:<user>`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use approval_host::Deployment;
use approval_host::mcp::pins::{self, PinBook, PinError};

use crate::{Context, UsageError};

/// `mcp pins`.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum PinsCommand {
    /// The pinned tool definitions of each server, and the ones withheld until a person
    /// approves them (each shown as a diff against its pin).
    List {
        /// The deployment file (its store and signing key).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Only this server.
        #[arg(long, value_name = "NAME")]
        server: Option<String>,
    },
    /// Approve the withheld definition of a tool: the gateway lists it and lets it be asked
    /// about from its next `tools/list` or call.
    Approve {
        /// The deployment file (its store and signing key).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The server's name (as in `mcp__<server>__<tool>`).
        server: String,
        /// The tool's name as the server lists it.
        tool: String,
        /// Which definition, when several wait (`sha256:…`, as `list` shows).
        #[arg(long, value_name = "HASH")]
        hash: Option<String>,
    },
}

/// Runs `mcp pins`.
pub(crate) fn run(ctx: &Context, command: PinsCommand) -> Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(run_async(ctx, command))
}

async fn run_async(ctx: &Context, command: PinsCommand) -> Result<ExitCode> {
    match command {
        PinsCommand::List { config, server } => {
            if let Some(s) = &server {
                approval_host::mcp::check_server_name(s)
                    .map_err(|e| UsageError(format!("--server: {e}")))?;
            }
            let service = open(ctx, &config)?;
            let store = service.store();
            let names: Vec<String> = match server {
                Some(s) => vec![pins::ledger_name(&s)],
                None => store
                    .list()?
                    .into_iter()
                    .filter(|n| n.starts_with(approval_host::audit::store::PINS_LOG_PREFIX))
                    .collect(),
            };
            let mut out = String::new();
            for name in names {
                let server = &name[approval_host::audit::store::PINS_LOG_PREFIX.len()..];
                let ledger = service.read_ledger(&name).await?;
                describe(server, &PinBook::from_records(&ledger.records), &mut out);
            }
            if out.is_empty() {
                out.push_str("no MCP tool definitions are pinned\n");
            }
            print!("{out}");
            Ok(ExitCode::SUCCESS)
        }
        PinsCommand::Approve {
            config,
            server,
            tool,
            hash,
        } => {
            approval_host::mcp::check_server_name(&server)
                .map_err(|e| UsageError(e.to_string()))?;
            let service = open(ctx, &config)?;
            let by = crate::rules_cmd::cli_user();
            match pins::approve(&service, &server, &tool, hash.as_deref(), &by).await {
                Ok(pinned) => {
                    println!(
                        "approved {server} {tool} {}{}",
                        pinned.hash,
                        pinned
                            .previous
                            .map(|p| format!(" (replaces {p})"))
                            .unwrap_or_default()
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(e @ (PinError::NothingWaiting { .. } | PinError::Ambiguous { .. })) => {
                    Err(UsageError(e.to_string()).into())
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

fn open(ctx: &Context, config: &std::path::Path) -> Result<approval_host::ApprovalService> {
    let deployment = Deployment::load(config)?;
    let service = crate::wiring::service(ctx, &deployment)?;
    approval_host::assemble::prepare(&service, &deployment, ctx.dir.as_path(), false)
        .map_err(crate::wiring::assemble_error)?;
    Ok(service)
}

/// `text` as a terminal shows it: every character that would draw as nothing, move the cursor
/// or reorder the line (controls, escapes, bidirectional and zero-width characters) written as
/// `\u{XXXX}`, so what a person reads is what they approve.
fn shown(text: &str) -> String {
    use approval_host::serve::console::visible::is_hidden;
    text.chars()
        .map(|c| {
            if is_hidden(c) || c == '\n' || c == '\t' {
                format!("\\u{{{:04X}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// One server's pins, then what waits, each waiting definition as a diff against its pin.
fn describe(server: &str, book: &PinBook, out: &mut String) {
    use std::fmt::Write as _;
    let mut tools: Vec<_> = book.pinned.iter().collect();
    tools.sort_by(|a, b| a.0.cmp(b.0));
    for (tool, pin) in tools {
        let _ = writeln!(
            out,
            "{server} {} {} pinned by {}",
            shown(tool),
            pin.hash,
            shown(&pin.by)
        );
    }
    for wanted in book.waiting() {
        let was = wanted
            .pinned
            .as_ref()
            .map(|p| format!("changed from {}", p.hash))
            .unwrap_or_else(|| "never pinned".to_owned());
        // Quoted for a shell: a tool's name is the server's to choose.
        let quoted = shlex::try_quote(&wanted.tool)
            .map(|q| shown(&q))
            .unwrap_or_else(|_| "<a name no shell can quote>".to_owned());
        let _ = writeln!(
            out,
            "{server} {} {} WITHHELD ({was}): approve with `approval-host mcp pins approve {server} {quoted} --hash {}`",
            shown(&wanted.tool),
            wanted.hash,
            wanted.hash
        );
        let before = wanted
            .pinned
            .as_ref()
            .map(|p| pins::pretty(&p.definition))
            .unwrap_or_default();
        let after = pins::pretty(&wanted.definition);
        for line in pins::diff_lines(&before, &after) {
            let _ = writeln!(out, "    {}", shown(&line));
        }
    }
}
