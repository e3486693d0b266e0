//! The hooks of the other agent CLIs (Codex, Gemini CLI, Copilot CLI): each CLI's documented hook
//! input read into the one call the rules see ([`tools`]: `Bash`, `Read`, `Edit`, `Write`,
//! `WebFetch`, `mcp__server__tool`), asked exactly as the Claude Code hook asks
//! ([`crate::claude_code::ask_until`]: the same turn, `tool/call`, question and decision on the
//! session's log), and the outcome written as the CLI's documented output.
//!
//! What a CLI cannot say falls back to the safe side: a CLI whose hook cannot grant (Codex's
//! `PreToolUse`) or cannot ask (Codex, Gemini CLI) prints no decision for such a call, so the
//! CLI's own approval flow decides; the host never prints a grant nobody made. A hook that
//! cannot answer at all blocks the call in the way the CLI honours ([`Cli::failure`]).

mod codex;
mod copilot;
mod gemini;
mod patch;
mod tools;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::claude_code::{self, HookInput, HookOptions, HookTurns, field, optional};
use crate::outcome::Outcome;
use crate::service::{ApprovalError, ApprovalService, Verdict};
use crate::tools::texts;

/// An agent CLI with a hook codec here (Claude Code has its own module, [`crate::claude_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    /// OpenAI Codex: `PreToolUse` and `PermissionRequest` command hooks.
    Codex,
    /// Gemini CLI: the `BeforeTool` hook.
    Gemini,
    /// GitHub Copilot CLI: the `preToolUse` hook.
    Copilot,
}

/// The hook event a call arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Before the tool runs: every call (Codex `PreToolUse`, Gemini `BeforeTool`, Copilot
    /// `preToolUse`).
    BeforeTool,
    /// Codex is about to ask its user (`PermissionRequest`): the one place Codex takes a grant.
    PermissionRequest,
    /// After the tool ran (Codex `PostToolUse`, Gemini `AfterTool`, Copilot `postToolUse`): only
    /// recorded ([`crate::after_tool`]).
    AfterTool,
}

/// A hook input read: the call as the rules see it, and what the output needs.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The call (tool name and arguments in the rule syntax's terms).
    pub input: HookInput,
    /// The event.
    pub event: Event,
    /// The tool's name in the CLI (what the model calls it, so what the texts it reads name).
    pub cli_tool: String,
}

/// What a hook that cannot answer does.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Exit 2 with the reason on stderr: the CLI blocks the call and shows the reason.
    Exit2(String),
    /// Print this and exit 0: the CLI treats a failing hook as no decision, so the refusal is
    /// printed as a decision instead.
    Print(Value),
}

impl Cli {
    /// Every CLI here.
    pub const ALL: [Cli; 3] = [Cli::Codex, Cli::Gemini, Cli::Copilot];

    /// The name on the command line (`hook codex`, `init gemini`).
    pub const fn name(self) -> &'static str {
        match self {
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
            Cli::Copilot => "copilot",
        }
    }

    /// The CLI as people name it.
    pub const fn title(self) -> &'static str {
        match self {
            Cli::Codex => "Codex",
            Cli::Gemini => "Gemini CLI",
            Cli::Copilot => "Copilot CLI",
        }
    }

    /// The agent id its calls are recorded under.
    pub const fn agent_id(self) -> &'static str {
        match self {
            Cli::Codex => "codex",
            Cli::Gemini => "gemini-cli",
            Cli::Copilot => "copilot-cli",
        }
    }

    /// The `serve` method a hook process forwards to.
    pub const fn method(self) -> &'static str {
        match self {
            Cli::Codex => "hook/codex",
            Cli::Gemini => "hook/gemini",
            Cli::Copilot => "hook/copilot",
        }
    }

    /// The CLI of a `serve` method.
    pub fn of_method(method: &str) -> Option<Cli> {
        Cli::ALL.into_iter().find(|c| c.method() == method)
    }

    /// Reads the hook's stdin JSON.
    ///
    /// # Errors
    /// Why the input is refused (the hook then fails as [`Cli::failure`] says).
    pub fn parse(self, v: &Value) -> Result<Parsed, String> {
        self.parse_at(v, false)
    }

    /// Reads the after-tool hook's stdin JSON: the call that ran, with the CLI's own call id
    /// (none for a CLI that gives none).
    ///
    /// # Errors
    /// Why the input is refused.
    pub fn parse_after(self, v: &Value) -> Result<Parsed, String> {
        self.parse_at(v, true)
    }

    fn parse_at(self, v: &Value, after: bool) -> Result<Parsed, String> {
        let parsed = match self {
            Cli::Codex => codex::parse(v, after),
            Cli::Gemini => gemini::parse(v, after),
            Cli::Copilot => copilot::parse(v, after),
        }?;
        crate::audit::store::validate_session_id(&parsed.input.session_id)
            .map_err(|e| e.to_string())?;
        Ok(parsed)
    }

    /// What the hook prints for `verdict`; `None` prints nothing.
    pub fn render(
        self,
        parsed: &Parsed,
        verdict: &Verdict,
        options: &HookOptions,
    ) -> Option<Value> {
        if parsed.event == Event::AfterTool {
            return None;
        }
        let decision = Decision::of(parsed, verdict, options);
        match self {
            Cli::Codex => codex::render(parsed.event, &decision),
            Cli::Gemini => gemini::render(&decision),
            Cli::Copilot => copilot::render(&decision),
        }
    }

    /// What the hook does when it cannot answer (bad input, no server and no fallback, a log
    /// that cannot be written): it blocks the call, the way this CLI honours.
    pub fn failure(self, reason: &str) -> Failure {
        match self {
            Cli::Codex | Cli::Gemini => Failure::Exit2(reason.to_owned()),
            // Copilot CLI logs and skips a hook that exits non-zero: only a printed `deny` blocks.
            Cli::Copilot => Failure::Print(copilot::deny(reason)),
        }
    }
}

/// A verdict as any CLI's output says it, before the CLI's own spelling.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// An answerer allowed this call once.
    Allow,
    /// Rejected or cancelled, with the text the model reads.
    Deny(String),
    /// Nobody decided and the deployment wants the CLI to ask its user, with the text it shows.
    Ask(String),
    /// Nobody decided and the deployment defers to the CLI's own settings.
    Defer,
}

impl Decision {
    fn of(parsed: &Parsed, verdict: &Verdict, options: &HookOptions) -> Decision {
        let decision = Decision::unnoted(parsed, verdict, options);
        let Some(note) = &options.note else {
            return decision;
        };
        match decision {
            Decision::Deny(reason) => Decision::Deny(format!("{reason} ({note})")),
            Decision::Ask(reason) => Decision::Ask(format!("{reason} ({note})")),
            other => other,
        }
    }

    fn unnoted(parsed: &Parsed, verdict: &Verdict, options: &HookOptions) -> Decision {
        let tool = parsed.cli_tool.as_str();
        match verdict.outcome {
            Outcome::AllowedOnce => Decision::Allow,
            Outcome::Rejected => Decision::Deny(texts::rejection(tool, verdict)),
            Outcome::Cancelled => Decision::Deny(texts::approval_cancelled(tool)),
            Outcome::Unavailable => {
                match options.undecided(parsed.input.permission_mode.as_deref()) {
                    claude_code::WhenUndecided::Ask => {
                        Decision::Ask(texts::approval_unavailable(tool))
                    }
                    claude_code::WhenUndecided::Defer => Decision::Defer,
                    claude_code::WhenUndecided::Deny => {
                        Decision::Deny(texts::approval_unavailable(tool))
                    }
                }
            }
        }
    }
}

/// The reason printed with a grant.
pub const ALLOWED_REASON: &str = claude_code::ALLOWED_REASON;

/// A hook call answered.
#[derive(Debug, Clone, PartialEq)]
pub struct CliAnswer {
    /// What decided.
    pub verdict: Verdict,
    /// What to print, or `None` for nothing.
    pub output: Option<Value>,
}

/// Records the call, asks the deployment inside the session's turn, and writes the CLI's output.
///
/// # Errors
/// The log could not be written; nothing was granted.
pub async fn ask_until(
    service: &ApprovalService,
    turns: &HookTurns,
    agent: &Agent,
    cli: Cli,
    parsed: &Parsed,
    options: &HookOptions,
    cancel: CancellationToken,
) -> Result<CliAnswer, ApprovalError> {
    let verdict = claude_code::decide_until(service, turns, agent, &parsed.input, cancel).await?;
    let output = cli.render(parsed, &verdict, options);
    Ok(CliAnswer { verdict, output })
}

/// A call id for a CLI whose hook input carries none: each hook call is its own call.
fn fresh_call_id(cli: Cli) -> String {
    format!("{}-{}", cli.name(), uuid::Uuid::new_v4().simple())
}

/// An after-tool hook's input, for `cli` (`None`: Claude Code): the session, the agent id its
/// calls are recorded under, and the call that ran, read as the before-tool hook reads the call.
///
/// # Errors
/// Why the input is refused.
pub fn after_input(
    cli: Option<Cli>,
    v: &Value,
) -> Result<(String, &'static str, crate::after_tool::Ran), String> {
    let (input, agent_id) = match cli {
        None => (HookInput::after_value(v)?, claude_code::AGENT_ID),
        Some(cli) => (cli.parse_after(v)?.input, cli.agent_id()),
    };
    let ran = crate::after_tool::Ran {
        tool_name: input.tool_name,
        arguments: input.tool_input,
        call_id: input.tool_use_id,
    };
    Ok((input.session_id, agent_id, ran))
}
