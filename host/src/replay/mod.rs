//! `approval-host replay`: every recorded question asked again of another deployment, with no
//! person and no client to answer, never writing to the recorded logs.
//!
//! Each worker owns a scratch service ([`ScratchStore`]: appends validated, chained and dropped)
//! put together from the new deployment as a live host would be: its `[[rule]]` entries with the
//! user's and this project's standing rules as the store holds them now, its built-in
//! protections, its plugins (which must pass their `cases`), its default policy. A session is
//! replayed by one worker, in log order: the events that shape later questions are fed as
//! recorded (tool calls, modes, policy switches, session rules, turns), and each settled
//! question is asked again with what it recorded (agent, delegating agent, cwd, reason, call),
//! while the rule book's clock reads the question's recorded time (so a rule that had not yet
//! expired then still matches). Sessions run on as many workers as the machine has cores.
//!
//! A question that would reach a person or client settles with nobody to answer it, and counts
//! as "would ask" (see [`report`]). What shadow plugins said on live traffic is read back by
//! [`shadowed`].

pub mod report;
pub mod shadowed;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::assemble::{self, AssembleError};
use crate::audit::error::LogError;
use crate::audit::event::{Decided, Event};
use crate::audit::scratch::ScratchStore;
use crate::audit::store::{Store, parse_lines};
use crate::config::Deployment;
use crate::outcome::Outcome;
use crate::plugin::PluginHost;
use crate::plugin::mount::Mounted;
use crate::plugin::slot::QuarantinePolicy;
use crate::rules::{self, RuleBook};
use crate::service::{ApprovalError, ApprovalRequest, ApprovalService};

pub use report::{Decision, Kind, Replayed, Report, Skipped};

/// Which sessions to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sessions {
    /// Every session in the store.
    All,
    /// These.
    Named(Vec<String>),
}

/// What to replay, and where the host's state lives.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The sessions.
    pub sessions: Sessions,
    /// Only questions asked at or after this time (earlier events still shape the session).
    pub since: Option<SystemTime>,
    /// How many sessions are replayed at once (at least 1).
    pub workers: usize,
    /// The host's state directory: its built-in protections name it.
    pub state_dir: PathBuf,
}

/// A replay that could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The recorded store could not be read.
    #[error("reading the recorded logs: {0}")]
    Read(#[from] LogError),
    /// The new deployment could not be put together.
    #[error(transparent)]
    Assemble(#[from] AssembleError),
    /// A session named with `--session` is not in the store.
    #[error("no session {0:?} in the store")]
    NoSuchSession(String),
    /// A recorded session could not be fed to the scratch service.
    #[error("session {session}: {source}")]
    Feed {
        /// The session.
        session: String,
        /// Why.
        #[source]
        source: ApprovalError,
    },
}

/// One worker's scratch service and the clock its rule book reads.
struct Worker {
    service: ApprovalService,
    clock: Arc<Mutex<SystemTime>>,
}

/// Replays the recorded questions of `recorded` against `deployment`.
///
/// # Errors
/// The store cannot be read, a named session is missing, the deployment's parts do not load (a
/// plugin that fails its cases), or a recorded session does not fit its own log's rules.
pub async fn run(
    recorded: Arc<dyn Store>,
    deployment: &Deployment,
    host: &PluginHost,
    options: ReplayOptions,
) -> Result<Report, ReplayError> {
    let names = sessions(&*recorded, &options.sessions)?;
    let seeds = standing_rules(&*recorded, deployment)?;
    let mut workers = Vec::new();
    let mut mounts: Vec<Mounted> = Vec::new();
    for _ in 0..options.workers.max(1).min(names.len().max(1)) {
        let (worker, mounted) = worker(deployment, host, &seeds, &options)?;
        workers.push(worker);
        mounts.push(mounted);
    }
    let queue = Arc::new(Mutex::new(names.iter().cloned().collect::<VecDeque<_>>()));
    let mut tasks = tokio::task::JoinSet::new();
    for worker in workers {
        let queue = queue.clone();
        let recorded = recorded.clone();
        let since = options.since;
        tasks.spawn(async move {
            let mut done = Vec::new();
            loop {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
                let Some(session) = next else { break };
                let found = replay_session(&worker, &*recorded, &session, since).await?;
                done.push((session, found));
            }
            Ok::<_, ReplayError>(done)
        });
    }
    let mut by_session = HashMap::new();
    while let Some(joined) = tasks.join_next().await {
        let done = joined.map_err(|e| ReplayError::Feed {
            session: "?".to_owned(),
            source: ApprovalError::Internal(e.to_string()),
        })??;
        by_session.extend(done);
    }
    drop(mounts);
    let mut report = Report {
        deployment: assemble::file_of(deployment),
        sessions: names.len() as u64,
        ..Report::default()
    };
    for name in &names {
        if let Some((questions, skipped)) = by_session.remove(name) {
            report.questions.extend(questions);
            let s = &mut report.skipped;
            s.cancelled += skipped.cancelled;
            s.unsettled += skipped.unsettled;
            s.before_format_2 += skipped.before_format_2;
            s.before_since += skipped.before_since;
        }
    }
    Ok(report)
}

/// The session logs to replay, in name order.
fn sessions(store: &dyn Store, which: &Sessions) -> Result<Vec<String>, ReplayError> {
    let all: Vec<String> = store
        .list()?
        .into_iter()
        .filter(|n| !crate::audit::store::is_ledger(n))
        .collect();
    match which {
        Sessions::All => Ok(all),
        Sessions::Named(named) => {
            for n in named {
                if !all.contains(n) {
                    return Err(ReplayError::NoSuchSession(n.clone()));
                }
            }
            Ok(named.clone())
        }
    }
}

/// Copies of the standing rules logs a deployment's rule book reads: the user's and its project's.
fn standing_rules(
    store: &dyn Store,
    deployment: &Deployment,
) -> Result<Vec<(String, Vec<u8>)>, ReplayError> {
    let project = rules::project_log(&assemble::project_of(deployment));
    let mut seeds = Vec::new();
    for name in [rules::USER_LOG.to_owned(), project] {
        let bytes = store.read(&name)?;
        if !bytes.is_empty() {
            seeds.push((name, bytes));
        }
    }
    Ok(seeds)
}

/// A scratch service put together from `deployment`, with its plugins mounted.
fn worker(
    deployment: &Deployment,
    host: &PluginHost,
    seeds: &[(String, Vec<u8>)],
    options: &ReplayOptions,
) -> Result<(Worker, Mounted), ReplayError> {
    let file = assemble::file_of(deployment);
    let mut store = ScratchStore::new();
    for (name, bytes) in seeds {
        store.seed(name.clone(), bytes.clone());
    }
    let service = ApprovalService::new(store, deployment.default_policy);
    service.set_protected(Some(deployment.protected(&options.state_dir)));
    let clock = Arc::new(Mutex::new(SystemTime::now()));
    let reads = clock.clone();
    let statics = assemble::statics(deployment).map_err(|source| AssembleError::Rules {
        file: file.clone(),
        source,
    })?;
    // No scope for proposals: a rule a plugin proposes in a replay would decide later questions
    // that the recorded run decided without it.
    let book = RuleBook::open(
        service.store(),
        &assemble::project_of(deployment),
        statics,
        Vec::new(),
        Arc::new(move || *reads.lock().unwrap_or_else(|p| p.into_inner())),
    )
    .map_err(|source| AssembleError::Rules { file, source })?;
    service.set_rules(Some(book));
    let mounted = assemble::mount(&service, host, deployment, QuarantinePolicy::default())?;
    Ok((Worker { service, clock }, mounted))
}

/// Replays one session on `worker`.
async fn replay_session(
    worker: &Worker,
    recorded: &dyn Store,
    session: &str,
    since: Option<SystemTime>,
) -> Result<(Vec<Replayed>, Skipped), ReplayError> {
    let bytes = recorded.read(session)?;
    let records = parse_lines(session, &bytes)?;
    let decided: HashMap<&str, &Decided> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Decided(d) => Some((d.id.as_str(), d)),
            _ => None,
        })
        .collect();
    let service = &worker.service;
    let feed_err = |source| ReplayError::Feed {
        session: session.to_owned(),
        source,
    };
    // Holds the scratch session open for the whole replay: its state lives only in memory.
    let _holder = service
        .agent_as(session, "replay", None)
        .await
        .map_err(feed_err)?;
    let mut calls: HashMap<String, (serde_json::Value, Vec<String>)> = HashMap::new();
    let mut out = Vec::new();
    let mut skipped = Skipped::default();
    for record in &records {
        let asked = match &record.event {
            Event::Asked(asked) => asked,
            other => {
                if let Event::ToolCall(call) = other {
                    calls.insert(
                        call.call_id.clone(),
                        (call.arguments.clone(), call.redacted.clone()),
                    );
                }
                service.feed(session, other).await.map_err(feed_err)?;
                continue;
            }
        };
        let Some(decision) = decided.get(asked.id.as_str()) else {
            skipped.unsettled += 1;
            continue;
        };
        if decision.outcome == Outcome::Cancelled {
            skipped.cancelled += 1;
            continue;
        }
        let Some(agent_id) = &asked.agent else {
            skipped.before_format_2 += 1;
            continue;
        };
        let at = humantime::parse_rfc3339(&record.ts).unwrap_or_else(|_| SystemTime::now());
        if since.is_some_and(|since| at < since) {
            skipped.before_since += 1;
            continue;
        }
        *worker.clock.lock().unwrap_or_else(|p| p.into_inner()) = at;
        let agent = service
            .agent_as(session, agent_id, asked.parent_agent.as_deref())
            .await
            .map_err(feed_err)?;
        let read = Arc::new(AtomicBool::new(false));
        let mut request =
            ApprovalRequest::new(&agent, asked.tool_name.clone()).observe_arguments(read.clone());
        if let Some(call_id) = &asked.call_id {
            request = request.call_id(call_id.clone());
        }
        if let Some(reason) = &asked.reason {
            request = request.reason(reason.clone());
        }
        if let Some(cwd) = &asked.cwd {
            request = request.cwd(cwd.clone());
        }
        if !asked.undeclared.is_empty() {
            request = request.undeclared(asked.undeclared.clone());
        }
        let verdict = service.ask(request).await.map_err(feed_err)?;
        let call = asked.call_id.as_ref().and_then(|id| calls.get(id));
        let redacted_read = match call {
            Some((_, redacted)) if read.load(Ordering::Relaxed) => redacted.clone(),
            _ => Vec::new(),
        };
        out.push(Replayed {
            session: session.to_owned(),
            seq: record.seq,
            ts: record.ts.to_string(),
            id: asked.id.clone(),
            tool: asked.tool_name.clone(),
            arguments: report::argument_line(call.map(|(a, _)| a), 80),
            recorded: Decision::recorded(decision),
            replayed: Decision::replayed(&verdict),
            redacted_read,
            failure: verdict.failure.as_ref().map(|f| {
                (
                    f.plugin.clone().unwrap_or_else(|| "host".to_owned()),
                    f.kind.to_string(),
                )
            }),
        });
    }
    Ok((out, skipped))
}
