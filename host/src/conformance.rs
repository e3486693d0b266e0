//! Conformance cases: data that pins what a plugin answers, run the same way against any build.
//!
//! A case file is JSON: `{"about": "...", "cases": [case...]}`. A case names the gate it is for
//! (optional in an author's own file), the plugin's `config`, the question (`tool`, optional
//! `call_id`) and the call's `arguments` (recorded as its `tool/call` first, so the plugin can
//! read them), and what it must answer: `allow-once`, `reject`, `cancel`, `next`,
//! `failed (<kind>)` for a plugin that must fail (`trap`, `timeout`, `memory`...), or `refused` for
//! a config the plugin must refuse at load (plugin API 0.2's `validate-config`). A case may also
//! pin the exact `reason`: the one the plugin's decision carries, or its refusal message. Each case
//! runs in its own session through the real seam, so the answer is read back from the audit log.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::outcome::{Decision, Outcome};
use crate::plugin::spec::{PluginSpec, Role};
use crate::plugin::{Plugin, PluginError, PluginHost};
use crate::service::{ApprovalRequest, ApprovalService};
use crate::waterfall::{Listener, Position, Scope};

/// A case file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// What the file is for.
    #[serde(default)]
    pub about: Option<String>,
    /// The cases, in order.
    pub cases: Vec<Case>,
}

/// One case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// What the case shows.
    pub name: String,
    /// The gate it is for; a runner for one plugin runs the cases for its name and those without.
    #[serde(default)]
    pub gate: Option<String>,
    /// The plugin's `[plugin.config]`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// The tool the question is for.
    pub tool: String,
    /// The exact call id.
    #[serde(default)]
    pub call_id: Option<String>,
    /// The call's JSON arguments (recorded only with a call id).
    #[serde(default)]
    pub arguments: Option<Value>,
    /// The expected answer.
    pub expect: String,
    /// The exact reason the answer must carry (the decided event's `reason`, or a refusal's
    /// message); when absent, any reason passes.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A case file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file does not fit the format.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where and why.
        source: serde_json::Error,
    },
    /// A case expects something no plugin can answer.
    #[error(
        "{path}: case {case:?}: expect {expect:?} is not one of allow-once, reject, cancel, next, refused or failed (<kind>)"
    )]
    Expect {
        /// The file.
        path: PathBuf,
        /// The case.
        case: String,
        /// What it expects.
        expect: String,
    },
}

impl Suite {
    /// Reads a case file.
    pub fn load(path: &Path) -> Result<Suite, SuiteError> {
        let text = std::fs::read_to_string(path).map_err(|source| SuiteError::Read {
            path: path.to_owned(),
            source,
        })?;
        Suite::parse(path, &text)
    }

    /// Parses a case file; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Suite, SuiteError> {
        let suite: Suite = serde_json::from_str(text).map_err(|source| SuiteError::Parse {
            path: path.to_owned(),
            source,
        })?;
        for case in &suite.cases {
            let e = case.expect.as_str();
            let known = matches!(e, "allow-once" | "reject" | "cancel" | "next" | REFUSED)
                || (e.starts_with("failed (") && e.ends_with(')'));
            if !known {
                return Err(SuiteError::Expect {
                    path: path.to_owned(),
                    case: case.name.clone(),
                    expect: case.expect.clone(),
                });
            }
        }
        Ok(suite)
    }

    /// The cases for the plugin `name`: those for that gate and those naming none.
    pub fn for_plugin<'s>(&'s self, name: &str) -> impl Iterator<Item = &'s Case> {
        let name = name.to_owned();
        self.cases
            .iter()
            .filter(move |c| c.gate.as_deref().is_none_or(|g| g == name))
    }
}

/// The `expect` of a case whose config the plugin must refuse at load.
pub const REFUSED: &str = "refused";

/// What a listener answered, read back from the `approval/decided` it produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A decision: `allow-once`, `reject`, `cancel` or (nothing decided) `next`.
    Decided(Decision),
    /// The listener failed, with the recorded failure kind.
    Failed(String),
    /// The plugin refused the case's config at load, with its message.
    Refused(String),
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Decided(d) => f.write_str(d.as_str()),
            Answer::Failed(kind) => write!(f, "failed ({kind})"),
            Answer::Refused(_) => f.write_str(REFUSED),
        }
    }
}

/// Runs `case` in a fresh session `session` of `service` with `listener` as its only answerer.
pub async fn ask(
    service: &ApprovalService,
    session: &str,
    case: &Case,
    listener: impl Listener,
) -> Result<Answer, crate::service::ApprovalError> {
    ask_explained(service, session, case, listener)
        .await
        .map(|(answer, _)| answer)
}

/// [`ask`], with the reason the decided event recorded.
pub async fn ask_explained(
    service: &ApprovalService,
    session: &str,
    case: &Case,
    listener: impl Listener,
) -> Result<(Answer, Option<String>), crate::service::ApprovalError> {
    let agent = service.agent(session, "conformance").await?;
    service.start_turn(session).await?;
    let _registration = service.register(
        case.gate.as_deref().unwrap_or("plugin"),
        Scope::Agent(agent.clone()),
        Position::Front,
        listener,
    );
    if let (Some(call_id), Some(arguments)) = (&case.call_id, &case.arguments) {
        service
            .record_tool_call(&agent, call_id, &case.tool, arguments.clone())
            .await?;
    }
    let mut request = ApprovalRequest::new(&agent, case.tool.clone());
    if let Some(call_id) = &case.call_id {
        request = request.call_id(call_id.clone());
    }
    let decided = service.ask(request).await?;
    service.end_turn(session).await?;
    let answer = match (decided.failure, decided.outcome) {
        (Some(failure), _) => Answer::Failed(failure.kind.as_str().to_owned()),
        (None, Outcome::AllowedOnce) => Answer::Decided(Decision::AllowOnce),
        (None, Outcome::Rejected) => Answer::Decided(Decision::Reject),
        (None, Outcome::Cancelled) => Answer::Decided(Decision::Cancel),
        (None, Outcome::Unavailable) => Answer::Decided(Decision::Next),
    };
    Ok((answer, decided.reason))
}

/// One case's result.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// What the plugin answered.
    pub answer: Answer,
    /// What the case expects.
    pub expect: String,
    /// The reason the answer carried (a refusal's message for [`Answer::Refused`]).
    pub reason: Option<String>,
    /// The reason the case pins, if it does.
    pub expect_reason: Option<String>,
}

impl CaseResult {
    /// Whether the answer is the expected one, with the pinned reason when the case pins one.
    pub fn passed(&self) -> bool {
        self.answer.to_string() == self.expect
            && self
                .expect_reason
                .as_ref()
                .is_none_or(|want| self.reason.as_ref() == Some(want))
    }
}

/// Runs `cases` against the component `bytes`, loaded with `base`'s settings and each case's
/// config (one load per distinct config), each case in its own session of `service`.
pub async fn run<'c>(
    host: &PluginHost,
    base: &PluginSpec,
    bytes: &[u8],
    cases: impl IntoIterator<Item = &'c Case>,
    service: &ApprovalService,
) -> Result<Vec<CaseResult>, ConformanceError> {
    // A config the plugin refused is a case's answer, not the run's error.
    let mut loaded: BTreeMap<BTreeMap<String, String>, Result<Arc<Plugin>, String>> =
        BTreeMap::new();
    let mut results = Vec::new();
    for (i, case) in cases.into_iter().enumerate() {
        let plugin = match loaded.get(&case.config) {
            Some(p) => p.clone(),
            None => {
                let mut spec = base.clone();
                spec.config = case.config.clone();
                let plugin = match host.load_bytes(&spec, bytes) {
                    Ok(plugin) => Ok(plugin),
                    Err(PluginError::Config { message, .. }) => Err(message),
                    Err(other) => return Err(other.into()),
                };
                loaded.insert(case.config.clone(), plugin.clone());
                plugin
            }
        };
        let (answer, reason) = match plugin {
            Ok(plugin) => {
                ask_explained(service, &format!("case-{i}"), case, plugin.listener()).await?
            }
            Err(message) => (Answer::Refused(message.clone()), Some(message)),
        };
        results.push(CaseResult {
            name: case.name.clone(),
            answer,
            expect: case.expect.clone(),
            reason,
            expect_reason: case.reason.clone(),
        });
    }
    Ok(results)
}

/// A conformance run that could not finish.
#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    /// The plugin did not load.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// The seam failed (the state directory).
    #[error(transparent)]
    Approval(#[from] crate::service::ApprovalError),
}

/// The spec a conformance run loads a plugin with: a gate named `name` at `path`.
pub fn spec(name: &str, path: &Path) -> PluginSpec {
    PluginSpec::new(name, path, Role::Gate)
}
