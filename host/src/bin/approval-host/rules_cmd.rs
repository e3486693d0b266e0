//! `approval-host rules`: list, add, revoke and explain standing rules from the command line,
//! through the same rule book (and the same durable logs) a running host uses; a running `serve`
//! picks the changes up within its refresh interval.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use approval_host::answer::{Effect, RuleScope};
use approval_host::audit::store::validate_session_id;
use approval_host::rules::{self, NewRule, RuleBook, RuleView, pattern::Call};
use approval_host::{ApprovalError, ApprovalService, Deployment};
use clap::{Subcommand, ValueEnum};

use crate::UsageError;

/// What `rules` does.
#[derive(Subcommand, Debug)]
pub enum RulesCommand {
    /// Print the active rules (deployment, project, user, and with --session that session's):
    /// id, effect, rule, scope, expiry, creator and reason.
    ///
    /// Example: `approval-host rules list --scope project --json`
    List {
        /// The deployment file whose project rules to show [default: in a project `init` set up, the deployment its hooks read; else the embedded default].
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Only this scope.
        #[arg(long, value_enum)]
        scope: Option<ScopeArg>,
        /// Also the rules of this session.
        #[arg(long, value_name = "S")]
        session: Option<String>,
        /// One JSON array instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Add a standing rule, durable before this prints its id.
    ///
    /// Examples: `rules add 'Bash(npm run test:*)'`, `rules add 'Read(./src/**)' --for 8h`,
    /// `rules add 'Bash(git push:*)' --effect reject --scope user --reason "pushes go through CI"`.
    Add {
        /// `Tool` or `Tool(pattern)`: a command prefix `Bash(npm run test:*)` or exact
        /// command `Bash(npm test)`, a path glob `Read(./src/**)`, `Edit(//abs/**)`,
        /// `Read(~/notes/*)`, a domain `WebFetch(domain:example.com)`, a tool glob `mcp__github__*`.
        rule: String,
        /// The deployment file whose project the rule belongs to [default: in a project `init` set up, the deployment its hooks read; else the embedded default].
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Allow or reject matching calls.
        #[arg(long, value_enum, default_value = "allow")]
        effect: EffectArg,
        /// Where it applies.
        #[arg(long, value_enum, default_value = "project")]
        scope: ScopeArg,
        /// The session, for --scope session.
        #[arg(long, value_name = "S")]
        session: Option<String>,
        /// How long it lasts (`30m`, `8h`, `7d`) [default: until revoked].
        #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
        lasts: Option<Duration>,
        /// Why (shown in lists; a reject rule's reason reaches the model).
        #[arg(long, value_name = "R")]
        reason: Option<String>,
        /// A call the rule must decide (a command, path or URL, as the rule reads it); the rule
        /// is refused, and nothing written, when it does not. Repeatable.
        #[arg(long = "example", value_name = "CALL")]
        examples: Vec<String>,
        /// A call the rule must not decide. Repeatable.
        #[arg(long = "not-example", value_name = "CALL")]
        not_examples: Vec<String>,
        /// Print the rule as JSON instead of its id.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a rule: no decision that starts after this returns uses it.
    ///
    /// Example: `approval-host rules revoke 365b19467b71 --reason "no longer needed"`
    Revoke {
        /// The rule's id (from `rules list`).
        id: String,
        /// The deployment file whose project the rule belongs to [default: in a project `init` set up, the deployment its hooks read; else the embedded default].
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The session of a session rule.
        #[arg(long, value_name = "S")]
        session: Option<String>,
        /// Why.
        #[arg(long, value_name = "R")]
        reason: Option<String>,
    },
    /// Say which rule (if any) would decide a call, and how. Changes nothing.
    ///
    /// Example: `approval-host rules explain --tool Bash --arguments '{"command":"npm run test"}'`
    Explain {
        /// The tool.
        #[arg(long, value_name = "T")]
        tool: String,
        /// The call's JSON arguments (`{"command": "npm test"}`, `{"file_path": "src/a.rs"}`).
        #[arg(long, value_name = "JSON")]
        arguments: Option<String>,
        /// The asker's working directory (relative path rules are relative to it).
        #[arg(long, value_name = "DIR")]
        cwd: Option<String>,
        /// Also consider this session's rules.
        #[arg(long, value_name = "S")]
        session: Option<String>,
        /// The deployment file [default: in a project `init` set up, the deployment its hooks read; else the embedded default].
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

/// A rule's scope on the command line.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum ScopeArg {
    /// That session only.
    Session,
    /// Every session of this deployment.
    Project,
    /// Every deployment on this state directory.
    User,
}

impl From<ScopeArg> for RuleScope {
    fn from(s: ScopeArg) -> RuleScope {
        match s {
            ScopeArg::Session => RuleScope::Session,
            ScopeArg::Project => RuleScope::Project,
            ScopeArg::User => RuleScope::User,
        }
    }
}

/// A rule's effect on the command line.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum EffectArg {
    /// Matching calls proceed without asking.
    Allow,
    /// Matching calls are rejected.
    Reject,
}

impl From<EffectArg> for Effect {
    fn from(e: EffectArg) -> Effect {
        match e {
            EffectArg::Allow => Effect::Allow,
            EffectArg::Reject => Effect::Reject,
        }
    }
}

/// Who the command line is, for a rule's creator and a revocation's `by`.
pub(crate) fn cli_user() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".to_owned());
    format!("cli:{user}")
}

/// The deployment the rules are read with: `--config`, else the one the hooks of the project
/// set up here read (refused, naming the choices, when several CLIs were set up), else the
/// embedded default.
fn deployment(ctx: &crate::Context, config: Option<&Path>) -> Result<Deployment> {
    Ok(match (config, &ctx.setup) {
        (Some(path), _) => Deployment::load(path)?,
        (None, Some(setup)) => Deployment::load(setup.deployment()?)?,
        (None, None) => Deployment::embedded(),
    })
}

/// A service over the state directory with the deployment's rules on (no plugins: rules
/// commands never run a gate).
fn open(ctx: &crate::Context, deployment: &Deployment) -> Result<(ApprovalService, Arc<RuleBook>)> {
    let state_dir = ctx.dir.as_path();
    let service = crate::wiring::service(ctx, deployment)?;
    approval_host::assemble::prepare(&service, deployment, state_dir, true)
        .map_err(crate::wiring::assemble_error)?;
    let book = service.rules().expect("prepared with rules");
    Ok((service, book))
}

fn check_session(session: Option<&str>) -> Result<()> {
    if let Some(s) = session {
        validate_session_id(s).map_err(|e| UsageError(format!("--session: {e}")))?;
    }
    Ok(())
}

/// Maps a rule's refusal to a usage error (exit 2) and anything else to a failure (exit 1).
fn rule_error(e: ApprovalError) -> anyhow::Error {
    match e {
        ApprovalError::Rule(
            r @ (rules::RuleError::Spec(_)
            | rules::RuleError::NoSession
            | rules::RuleError::Unknown(_)
            | rules::RuleError::Static(_)
            | rules::RuleError::BuiltIn(_)),
        ) => UsageError(r.to_string()).into(),
        other => other.into(),
    }
}

/// The line before the built-in rules in `rules list`.
pub const BUILT_IN_HEADING: &str = "built-in (they protect this host's own policy; not revocable):";

fn describe(r: &RuleView) -> String {
    let mut line = format!(
        "{}  {:<6} {}  [{}",
        r.id,
        r.effect.as_str(),
        r.rule,
        if r.built_in {
            "built-in"
        } else {
            r.scope.as_str()
        }
    );
    if let Some(s) = &r.session {
        line.push_str(&format!(" {s}"));
    }
    line.push(']');
    match &r.expires_at {
        Some(t) => line.push_str(&format!("  until {t}")),
        None => line.push_str("  no expiry"),
    }
    line.push_str(&format!("  by {}", r.creator));
    if let Some(reason) = &r.reason {
        line.push_str(&format!("  \"{reason}\""));
    }
    line
}

/// Runs a `rules` command.
pub fn run(ctx: &crate::Context, command: RulesCommand) -> Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(run_async(ctx, command))
}

async fn run_async(ctx: &crate::Context, command: RulesCommand) -> Result<ExitCode> {
    let state_dir = ctx.dir.as_path();
    match command {
        RulesCommand::List {
            config,
            scope,
            session,
            json,
        } => {
            check_session(session.as_deref())?;
            let deployment = deployment(ctx, config.as_deref())?;
            let (service, book) = open(ctx, &deployment)?;
            // Opening the session indexes its rules.
            if let Some(s) = &session {
                service.load_session_rules(s).await?;
            }
            let mut rules: Vec<RuleView> = book
                .list(scope.map(RuleScope::from))
                .into_iter()
                .filter(|r| r.session.is_none() || r.session == session)
                .collect();
            let built_in = deployment.protected(state_dir).views();
            for (log, why) in book.broken() {
                eprintln!("approval-host: {}", rules::broken_warning(&log, &why));
            }
            if json {
                if scope.is_none() {
                    rules.extend(built_in);
                }
                println!("{}", serde_json::to_string_pretty(&rules)?);
            } else {
                for (log, why) in book.broken() {
                    println!("BROKEN  {}", rules::broken_warning(&log, &why));
                }
                if rules.is_empty() {
                    println!("no active rules");
                }
                for r in &rules {
                    println!("{}", describe(r));
                }
                if scope.is_none() {
                    println!("{BUILT_IN_HEADING}");
                    for r in &built_in {
                        println!("{}", describe(r));
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Add {
            rule,
            config,
            effect,
            scope,
            session,
            lasts,
            reason,
            examples,
            not_examples,
            json,
        } => {
            check_session(session.as_deref())?;
            let scope = RuleScope::from(scope);
            if scope == RuleScope::Session && session.is_none() {
                return Err(UsageError("--scope session needs --session".to_owned()).into());
            }
            if scope != RuleScope::Session && session.is_some() {
                return Err(UsageError("--session goes with --scope session".to_owned()).into());
            }
            // A rule that does not parse changes nothing, not even the rules logs' existence.
            let spec = rules::pattern::parse(&rule).map_err(|e| UsageError(e.to_string()))?;
            // Relative examples are read from where the command runs.
            let examples = rules::examples::Examples {
                matching: examples,
                not_matching: not_examples,
                cwd: std::env::current_dir()
                    .ok()
                    .map(|d| d.display().to_string()),
            };
            rules::examples::check(&spec, effect.into(), &examples)
                .map_err(|e| UsageError(e.to_string()))?;
            let (service, _book) = open(ctx, &deployment(ctx, config.as_deref())?)?;
            let view = service
                .add_rule(NewRule {
                    rule,
                    effect: effect.into(),
                    scope,
                    session,
                    lasts,
                    creator: cli_user(),
                    reason,
                })
                .await
                .map_err(rule_error)?;
            if json {
                println!("{}", serde_json::to_string(&view)?);
            } else {
                println!("{}", view.id);
                eprintln!("added {}", describe(&view));
            }
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Revoke {
            id,
            config,
            session,
            reason,
        } => {
            check_session(session.as_deref())?;
            let (service, _book) = open(ctx, &deployment(ctx, config.as_deref())?)?;
            if let Some(s) = &session {
                service.load_session_rules(s).await?;
            }
            service
                .revoke_rule(&id, &cli_user(), reason)
                .await
                .map_err(rule_error)?;
            println!("revoked {id}");
            Ok(ExitCode::SUCCESS)
        }
        RulesCommand::Explain {
            tool,
            arguments,
            cwd,
            session,
            config,
        } => {
            check_session(session.as_deref())?;
            let arguments = arguments
                .map(|a| {
                    serde_json::from_str::<serde_json::Value>(&a)
                        .map_err(|e| UsageError(format!("--arguments is not JSON: {e}")))
                })
                .transpose()?;
            let deployment = deployment(ctx, config.as_deref())?;
            let (service, book) = open(ctx, &deployment)?;
            if let Some(s) = &session {
                service.load_session_rules(s).await?;
            }
            let call = Call {
                tool: &tool,
                arguments: arguments.as_ref(),
                cwd: cwd.as_deref(),
                undeclared: &[],
            };
            // The built-in rules decide before any other.
            let protected = deployment.protected(state_dir);
            if let Some(found) = protected.check(&tool, arguments.as_ref(), cwd.as_deref()) {
                let view = protected
                    .views()
                    .into_iter()
                    .find(|v| v.id == found.area.id)
                    .expect("every area has its view");
                println!("rejected by rule {}: {}", describe(&view), found.reason());
                return Ok(ExitCode::SUCCESS);
            }
            for (log, why) in book.broken() {
                println!("BROKEN  {}", rules::broken_warning(&log, &why));
            }
            match book.peek(&call, session.as_deref().unwrap_or("")) {
                Some(m) => {
                    let verb = match m.effect {
                        Effect::Allow => "allowed once",
                        Effect::Reject => "rejected",
                    };
                    println!("{verb} by rule {}", describe(&m.rule.view()));
                }
                None => println!("no rule decides this call; it goes on to the plugins"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
