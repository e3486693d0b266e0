//! The events a session log holds; [`Record`] (in `record.rs`) is the line each is stored as.
//!
//! A record is one JSON line: `{"seq": N, "ts": "<RFC 3339>", "type": "<event type>", "data": {...}}`.
//! Event data is parsed strictly (unknown fields, unknown outcomes and unknown policies are
//! refused), so a log that replays is a log the validator would have written.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::outcome::{FailureKind, Outcome};
use crate::policy::Policy;

mod record;
pub use record::{MOST_NESTING, nesting};
mod stamp;

pub use record::Record;
pub use stamp::Stamp;

/// The event type names, written once.
pub mod types {
    /// A turn opened; approval requests are accepted until `turn/end`.
    pub const TURN_START: &str = "turn/start";
    /// The open turn closed.
    pub const TURN_END: &str = "turn/end";
    /// A tool call the agent made, with its arguments.
    pub const TOOL_CALL: &str = "tool/call";
    /// The result of a tool call.
    pub const TOOL_RESULT: &str = "tool/result";
    /// An approval question was asked.
    pub const APPROVAL_ASKED: &str = "approval/asked";
    /// An approval question settled.
    pub const APPROVAL_DECIDED: &str = "approval/decided";
    /// The session's approval policy was switched.
    pub const APPROVAL_POLICY: &str = "approval/policy";
    /// A command hook was started for a tool call.
    pub const HOOK_INVOKED: &str = "hook/invoked";
    /// A command hook finished (or failed to).
    pub const HOOK_RESULT: &str = "hook/result";
    /// The session's sandbox mode was switched.
    pub const SANDBOX_MODE: &str = "sandbox/mode";
    /// A standing rule was added (to a rules log, or to a session's log for session scope).
    pub const RULE_ADDED: &str = "rule/added";
    /// A standing rule was revoked.
    pub const RULE_REVOKED: &str = "rule/revoked";
    /// A shadow plugin's would-be decision of a settled question.
    pub const APPROVAL_SHADOWED: &str = "approval/shadowed";
    /// A tool call ran that was never asked, or ran although it was refused: the agent CLI's
    /// after-tool hook saw it.
    pub const APPROVAL_UNASKED: &str = "approval/unasked";
    /// A message the MCP gateway passed on or refused without a question: the agent's refused
    /// or dropped, or a request the server made of the agent.
    pub const MCP_MESSAGE: &str = "mcp/message";
    /// An MCP tool's definition was pinned: on first use, or approved by a person.
    pub const MCP_PINNED: &str = "mcp/pinned";
    /// An MCP tool's definition the gateway withheld: changed from its pin, or new under
    /// `pin = "ask"`.
    pub const MCP_PIN_WANTED: &str = "mcp/pin-wanted";

    /// Every event type, in the order above.
    pub const ALL: [&str; 17] = [
        TURN_START,
        TURN_END,
        TOOL_CALL,
        TOOL_RESULT,
        APPROVAL_ASKED,
        APPROVAL_DECIDED,
        APPROVAL_POLICY,
        HOOK_INVOKED,
        HOOK_RESULT,
        SANDBOX_MODE,
        RULE_ADDED,
        RULE_REVOKED,
        APPROVAL_SHADOWED,
        APPROVAL_UNASKED,
        MCP_MESSAGE,
        MCP_PINNED,
        MCP_PIN_WANTED,
    ];
}

/// `turn/start` and `turn/end` carry no data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// `tool/call`: the call the agent made, recorded so gates can read its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolCall {
    /// The exact call id.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The call's JSON arguments.
    pub arguments: Value,
    /// The harness's permission mode when the call was made (Claude Code's `permission_mode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// The pointers of the argument values `[audit] redact` replaced in this record (the gates
    /// saw the real values; the log holds [`crate::audit::redact::REDACTED`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redacted: Vec<String>,
}

/// `tool/result`: what the call returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolResult {
    /// The exact call id.
    pub call_id: String,
    /// Whether the result is an error.
    pub is_error: bool,
    /// The result content.
    #[serde(default)]
    pub content: Value,
    /// The `pre-execute` listener that failed and so refused the call, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_listener: Option<String>,
}

/// `approval/asked {id, toolName, callId?, reason?, agent?, parentAgent?, cwd?, sandboxMode?,
/// undeclared?}`.
///
/// Since format 2 it records everything a gate is shown besides the call's arguments (which its
/// `tool/call` holds): the asking agent (always present from format 2 on, so its absence marks
/// an older record), its delegating agent, the asker's working directory and the session's own
/// sandbox mode as it stood when the question was asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Asked {
    /// The question's id (a fresh UUID).
    pub id: String,
    /// The tool the call is for.
    pub tool_name: String,
    /// The exact call id, when the asker has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The asker's human-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The asking agent's id (format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The agent that delegated to the asker, for a subagent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_agent: Option<String>,
    /// The asker's working directory, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The session's own sandbox mode when asked; absent when it runs at the deployment's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_mode: Option<SandboxModeName>,
    /// The call's arguments that the tool's own input schema does not declare (an MCP tool
    /// whose server listed one): no path rule covers such a call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undeclared: Vec<String>,
}

impl Asked {
    /// A question `id` about a call of `tool_name`, nothing else said.
    pub fn new(id: impl Into<String>, tool_name: impl Into<String>) -> Asked {
        Asked {
            id: id.into(),
            tool_name: tool_name.into(),
            call_id: None,
            reason: None,
            agent: None,
            parent_agent: None,
            cwd: None,
            sandbox_mode: None,
            undeclared: Vec::new(),
        }
    }

    /// Whether the record predates format 2 and so does not say who asked from where: such a
    /// question cannot be replayed as it was asked.
    pub fn before_format_2(&self) -> bool {
        self.agent.is_none()
    }
}

/// `approval/decided {id, outcome, answerer?, failure?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decided {
    /// The id of the `approval/asked` this settles.
    pub id: String,
    /// The outcome.
    pub outcome: Outcome,
    /// The listener that decided, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answerer: Option<String>,
    /// The SHA-256 of the plugin version that decided or failed, for plugins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// What failed, when a contained failure settled the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureRecord>,
    /// Why, as the deciding listener said it (at most 1 KiB, one printable line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A standing rule the deciding listener proposed with its decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<crate::answer::Proposal>,
    /// The id of the rule the host made from `proposal`; a proposal without it was declined.
    #[serde(default, rename = "ruleAdded", skip_serializing_if = "Option::is_none")]
    pub rule_added: Option<String>,
    /// Why the host did not make a rule from `proposal` (the decision stood for this call only).
    #[serde(
        default,
        rename = "ruleDeclined",
        skip_serializing_if = "Option::is_none"
    )]
    pub rule_declined: Option<String>,
    /// The standing rule that decided (`answerer` is then `rule:<id>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<crate::answer::RuleRef>,
    /// Whether the answerer was outside the process (a person at the console, a client).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outside: bool,
}

impl Decided {
    /// The decision of question `id`: `outcome`, nothing else said.
    pub fn bare(id: impl Into<String>, outcome: Outcome) -> Decided {
        Decided {
            id: id.into(),
            outcome,
            answerer: None,
            digest: None,
            failure: None,
            reason: None,
            proposal: None,
            rule_added: None,
            rule_declined: None,
            rule: None,
            outside: false,
        }
    }
}

/// The `failure` member of `approval/decided`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureRecord {
    /// The listener (plugin) that failed; absent when the host itself was interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// The class of failure.
    pub kind: FailureKind,
}

/// `approval/policy {policy, source?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySwitch {
    /// The new policy.
    pub policy: Policy,
    /// Who switched it (`user`, `delegation`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// `hook/invoked {hook, event, toolName, callId}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HookInvoked {
    /// The hook's command.
    pub hook: String,
    /// The hook event, `PreToolUse`.
    pub event: String,
    /// The tool.
    pub tool_name: String,
    /// The call.
    pub call_id: String,
}

/// `hook/result {hook, callId, exitCode?, decision?, reason?, error?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HookResult {
    /// The hook's command.
    pub hook: String,
    /// The call.
    pub call_id: String,
    /// The exit code, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// `allow`, `deny` or `ask`, when it decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Its reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why it failed (could not start, crashed, timed out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `sandbox/mode {mode, source?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSwitch {
    /// `read-only`, `workspace-write` or `danger-full-access`.
    pub mode: SandboxModeName,
    /// Who switched it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// `rule/added {id, tool, pattern?, effect, scope, expiresAt?, creator, reason?}`: a standing
/// rule, from the moment this record is durable until its `rule/revoked` or its expiry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleAdded {
    /// The rule's id, unique in its log.
    pub id: String,
    /// The tool: an exact name, or a glob (`mcp__github__*`).
    pub tool: String,
    /// The argument pattern inside `Tool(...)`; absent for every call of the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// `allow` or `reject`.
    pub effect: crate::answer::Effect,
    /// `session`, `project` or `user`.
    pub scope: crate::answer::RuleScope,
    /// When it stops matching (RFC 3339), if ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Who made it: `answerer:<name>`, `plugin:<name>`, `user:cli`, `deployment:<file>`.
    pub creator: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `rule/revoked {id, by, reason?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleRevoked {
    /// The revoked rule's id.
    pub id: String,
    /// Who revoked it.
    pub by: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What a shadow plugin would have answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Would {
    /// Allow this call.
    AllowedOnce,
    /// Reject it.
    Rejected,
    /// Dismiss the question.
    Cancelled,
    /// Say nobody can answer.
    Unavailable,
    /// Pass the question on.
    Next,
    /// Nothing: it failed (see `failure`).
    Failed,
}

impl Would {
    /// The spelling in the log: `allowed-once`, `rejected`, `cancelled`, `unavailable`, `next`,
    /// `failed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Would::AllowedOnce => "allowed-once",
            Would::Rejected => "rejected",
            Would::Cancelled => "cancelled",
            Would::Unavailable => "unavailable",
            Would::Next => "next",
            Would::Failed => "failed",
        }
    }
}

impl std::fmt::Display for Would {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `approval/shadowed {id, plugin, digest?, would, failure?, reason?, decided, agrees?}`: what a
/// shadow plugin would have decided about a settled question, recorded after the decision and
/// off its path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Shadowed {
    /// The settled question.
    pub id: String,
    /// The shadow's name (the `[[plugin]]` entry's).
    pub plugin: String,
    /// The SHA-256 of the shadow's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// What it would have answered.
    pub would: Would,
    /// How it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureKind>,
    /// Its reason, when it gave one (bounded as a decision's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The question's real outcome.
    pub decided: Outcome,
    /// Whether the shadow agrees with the real decision (it decided the same outcome, or passed
    /// on a question its deciding version did not decide either); absent when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agrees: Option<bool>,
}

/// Why a call that ran counts as unasked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnaskedWhy {
    /// No question of this session is about the call: its before-tool hook failed, timed out or
    /// was skipped.
    NotAsked,
    /// Its question was rejected (or cancelled) and the call ran anyway.
    Refused,
    /// Its question was asked but never answered: the hook stopped before it could (the
    /// question is still open, or was settled `unavailable` as interrupted when the log was
    /// next opened), so the CLI went on without an answer.
    NotAnswered,
}

impl UnaskedWhy {
    /// The log's spelling: `not-asked` or `refused`.
    pub const fn as_str(self) -> &'static str {
        match self {
            UnaskedWhy::NotAsked => "not-asked",
            UnaskedWhy::Refused => "refused",
            UnaskedWhy::NotAnswered => "not-answered",
        }
    }
}

/// `approval/unasked {toolName, why, callId?, question?, arguments?}`: a call the agent CLI ran
/// (its after-tool hook said so) that no question allowed. An alarm, not a decision: the call
/// already ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Unasked {
    /// The tool, in the rule syntax's name.
    pub tool_name: String,
    /// Why it counts as unasked.
    pub why: UnaskedWhy,
    /// The CLI's call id, when it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The question that refused it, for [`UnaskedWhy::Refused`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The call's arguments as the rules read them (redacted as `tool/call`'s are), when no
    /// `tool/call` of this session holds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

pub use crate::policy::SandboxModeName;

/// Which side of the MCP gateway a message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum McpFrom {
    /// The agent (the MCP client).
    Agent,
    /// The MCP server.
    Server,
}

/// What the MCP gateway did with a message it did not ask about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum McpHandled {
    /// A request answered with a JSON-RPC error, never forwarded.
    Refused,
    /// A notification not forwarded.
    Dropped,
    /// Forwarded: a request of the server's that the deployment lets through.
    Passed,
}

/// `mcp/message {from, method, handled, why?}`: a message the MCP gateway handled without a
/// question. From the agent: a method that could act unasked, or a message that is malformed
/// (refused, or dropped when a notification). From the server: its requests of the agent
/// (sampling, elicitation, roots), passed or refused as the deployment says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpMessage {
    /// Who sent it.
    pub from: McpFrom,
    /// Its method as written (bounded; empty when it had none that could be read).
    pub method: String,
    /// What the gateway did with it.
    pub handled: McpHandled,
    /// Why, for a message refused or dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The server that sent it, for a message from a server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

impl McpMessage {
    /// Who sent it, as a reader says it: `from the agent` or `from the server`.
    pub fn from_text(&self) -> &'static str {
        match self.from {
            McpFrom::Agent => "from the agent",
            McpFrom::Server => "from the server",
        }
    }

    /// What was done with it, in words.
    pub fn handled_text(&self) -> &'static str {
        match self.handled {
            McpHandled::Refused => "refused",
            McpHandled::Dropped => "dropped",
            McpHandled::Passed => "passed on",
        }
    }
}

/// `mcp/pinned {server, tool, hash, definition, by, previous?}`: the definition of `tool` (its
/// name, title, description, input and output schemas and annotations) that the gateway lists
/// and lets be called from now on, kept whole so a later change can be shown beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpPinned {
    /// The server's name (as in `mcp__<server>__<tool>`).
    pub server: String,
    /// The tool's name as the server lists it.
    pub tool: String,
    /// `sha256:<hex>` of the definition's canonical JSON.
    pub hash: String,
    /// The definition pinned.
    pub definition: Value,
    /// Who pinned it: `first-use`, or the person who approved it (`cli:<user>`,
    /// `console:<token>`).
    pub by: String,
    /// The hash this pin replaces, when the tool had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
}

/// `mcp/pin-wanted {server, tool, hash, definition, previous?}`: a definition the gateway saw
/// and withheld until a person approves it (changed from its pin, or new under `pin = "ask"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpPinWanted {
    /// The server's name.
    pub server: String,
    /// The tool's name as the server lists it.
    pub tool: String,
    /// `sha256:<hex>` of the definition's canonical JSON.
    pub hash: String,
    /// The definition seen.
    pub definition: Value,
    /// The pinned hash it differs from; `None` for a tool never pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
}

/// Who ended a turn its client did not end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TurnEndSource {
    /// The host that took the session over from a host that stopped answering (its lease ran
    /// out): the dead host's turn cannot go on, so a client that reconnects starts a new one.
    Takeover,
}

/// `turn/end` with `{source}`: a turn ended by the host rather than its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnEndBy {
    /// Who ended it.
    pub source: TurnEndSource,
}

/// `turn/end`'s data as read: empty, or with a source.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnEndData {
    #[serde(default)]
    source: Option<TurnEndSource>,
}

/// One event of a session log.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `turn/start`.
    TurnStart,
    /// `turn/end`, by the turn's client.
    TurnEnd,
    /// `turn/end {source}`, by the host (see [`TurnEndSource`]).
    TurnEndBy(TurnEndBy),
    /// `tool/call`.
    ToolCall(ToolCall),
    /// `tool/result`.
    ToolResult(ToolResult),
    /// `approval/asked`.
    Asked(Asked),
    /// `approval/decided`.
    Decided(Decided),
    /// `approval/policy`.
    Policy(PolicySwitch),
    /// `hook/invoked`.
    HookInvoked(HookInvoked),
    /// `hook/result`.
    HookResult(HookResult),
    /// `sandbox/mode`.
    Sandbox(SandboxSwitch),
    /// `rule/added`.
    RuleAdded(RuleAdded),
    /// `rule/revoked`.
    RuleRevoked(RuleRevoked),
    /// `approval/shadowed`.
    Shadowed(Shadowed),
    /// `approval/unasked`.
    Unasked(Unasked),
    /// `mcp/message`.
    McpMessage(McpMessage),
    /// `mcp/pinned`.
    McpPinned(McpPinned),
    /// `mcp/pin-wanted`.
    McpPinWanted(McpPinWanted),
}

/// Event data that does not fit its type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The type is not one of [`types::ALL`].
    #[error("unknown event type {0:?}")]
    UnknownType(String),
    /// The data does not parse as that type's data.
    #[error("{kind} data: {reason}")]
    BadData {
        /// The event type.
        kind: &'static str,
        /// What serde said.
        reason: String,
    },
}

impl Event {
    /// Whether it ends a turn (`turn/end`, by its client or the host).
    pub fn ends_turn(&self) -> bool {
        matches!(self, Event::TurnEnd | Event::TurnEndBy(_))
    }

    /// The event's type name.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::TurnStart => types::TURN_START,
            Event::TurnEnd | Event::TurnEndBy(_) => types::TURN_END,
            Event::ToolCall(_) => types::TOOL_CALL,
            Event::ToolResult(_) => types::TOOL_RESULT,
            Event::Asked(_) => types::APPROVAL_ASKED,
            Event::Decided(_) => types::APPROVAL_DECIDED,
            Event::Policy(_) => types::APPROVAL_POLICY,
            Event::HookInvoked(_) => types::HOOK_INVOKED,
            Event::HookResult(_) => types::HOOK_RESULT,
            Event::Sandbox(_) => types::SANDBOX_MODE,
            Event::RuleAdded(_) => types::RULE_ADDED,
            Event::RuleRevoked(_) => types::RULE_REVOKED,
            Event::Shadowed(_) => types::APPROVAL_SHADOWED,
            Event::Unasked(_) => types::APPROVAL_UNASKED,
            Event::McpMessage(_) => types::MCP_MESSAGE,
            Event::McpPinned(_) => types::MCP_PINNED,
            Event::McpPinWanted(_) => types::MCP_PIN_WANTED,
        }
    }

    /// Builds an event from its wire parts, refusing unknown types and data that does not fit
    /// (an unknown outcome or policy, a missing or unknown field).
    pub fn from_parts(kind: &str, data: Value) -> Result<Event, EventError> {
        Self::from_data(kind, data)
    }

    /// [`Event::from_parts`] from the data's JSON text, parsed once into its type.
    pub fn from_raw_parts(kind: &str, data: &str) -> Result<Event, EventError> {
        let mut de = serde_json::Deserializer::from_str(data);
        let event = Self::from_data(kind, &mut de)?;
        de.end().map_err(|e| EventError::BadData {
            kind: event.kind(),
            reason: e.to_string(),
        })?;
        Ok(event)
    }

    /// The one mapping from an event type to its data, over any JSON source.
    fn from_data<'de, D>(kind: &str, data: D) -> Result<Event, EventError>
    where
        D: serde::Deserializer<'de>,
        D::Error: std::fmt::Display,
    {
        fn parse<'de, T: Deserialize<'de>, D>(kind: &'static str, data: D) -> Result<T, EventError>
        where
            D: serde::Deserializer<'de>,
            D::Error: std::fmt::Display,
        {
            T::deserialize(data).map_err(|e| EventError::BadData {
                kind,
                reason: e.to_string(),
            })
        }
        Ok(match kind {
            types::TURN_START => {
                parse::<Empty, _>(types::TURN_START, data)?;
                Event::TurnStart
            }
            types::TURN_END => match parse::<TurnEndData, _>(types::TURN_END, data)?.source {
                None => Event::TurnEnd,
                Some(source) => Event::TurnEndBy(TurnEndBy { source }),
            },
            types::TOOL_CALL => Event::ToolCall(parse(types::TOOL_CALL, data)?),
            types::TOOL_RESULT => Event::ToolResult(parse(types::TOOL_RESULT, data)?),
            types::APPROVAL_ASKED => Event::Asked(parse(types::APPROVAL_ASKED, data)?),
            types::APPROVAL_DECIDED => Event::Decided(parse(types::APPROVAL_DECIDED, data)?),
            types::APPROVAL_POLICY => Event::Policy(parse(types::APPROVAL_POLICY, data)?),
            types::HOOK_INVOKED => Event::HookInvoked(parse(types::HOOK_INVOKED, data)?),
            types::HOOK_RESULT => Event::HookResult(parse(types::HOOK_RESULT, data)?),
            types::SANDBOX_MODE => Event::Sandbox(parse(types::SANDBOX_MODE, data)?),
            types::RULE_ADDED => Event::RuleAdded(parse(types::RULE_ADDED, data)?),
            types::RULE_REVOKED => Event::RuleRevoked(parse(types::RULE_REVOKED, data)?),
            types::APPROVAL_SHADOWED => Event::Shadowed(parse(types::APPROVAL_SHADOWED, data)?),
            types::APPROVAL_UNASKED => Event::Unasked(parse(types::APPROVAL_UNASKED, data)?),
            types::MCP_MESSAGE => Event::McpMessage(parse(types::MCP_MESSAGE, data)?),
            types::MCP_PINNED => Event::McpPinned(parse(types::MCP_PINNED, data)?),
            types::MCP_PIN_WANTED => Event::McpPinWanted(parse(types::MCP_PIN_WANTED, data)?),
            other => return Err(EventError::UnknownType(other.to_owned())),
        })
    }

    /// The event's `data` object.
    pub fn data(&self) -> Value {
        let value = match self {
            Event::TurnStart | Event::TurnEnd => serde_json::to_value(Empty {}),
            Event::TurnEndBy(d) => serde_json::to_value(d),
            Event::ToolCall(d) => serde_json::to_value(d),
            Event::ToolResult(d) => serde_json::to_value(d),
            Event::Asked(d) => serde_json::to_value(d),
            Event::Decided(d) => serde_json::to_value(d),
            Event::Policy(d) => serde_json::to_value(d),
            Event::HookInvoked(d) => serde_json::to_value(d),
            Event::HookResult(d) => serde_json::to_value(d),
            Event::Sandbox(d) => serde_json::to_value(d),
            Event::RuleAdded(d) => serde_json::to_value(d),
            Event::RuleRevoked(d) => serde_json::to_value(d),
            Event::Shadowed(d) => serde_json::to_value(d),
            Event::Unasked(d) => serde_json::to_value(d),
            Event::McpMessage(d) => serde_json::to_value(d),
            Event::McpPinned(d) => serde_json::to_value(d),
            Event::McpPinWanted(d) => serde_json::to_value(d),
        };
        // These types serialise plain structs of strings, enums and JSON values: infallible.
        value.unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn asked_omits_absent_fields() {
        let e = Event::Asked(Asked::new("q", "bash"));
        assert_eq!(e.data(), json!({"id": "q", "toolName": "bash"}));
    }

    #[test]
    fn a_turn_end_carries_its_source_only_when_the_host_ended_it() {
        assert_eq!(Event::TurnEnd.data(), json!({}));
        assert_eq!(
            Event::from_parts(types::TURN_END, json!({})).unwrap(),
            Event::TurnEnd
        );
        let by = Event::TurnEndBy(TurnEndBy {
            source: TurnEndSource::Takeover,
        });
        assert_eq!(by.data(), json!({"source": "takeover"}));
        assert_eq!(by.kind(), types::TURN_END);
        assert_eq!(
            Event::from_parts(types::TURN_END, json!({"source": "takeover"})).unwrap(),
            by
        );
        assert!(Event::from_parts(types::TURN_END, json!({"source": "whim"})).is_err());
        assert!(Event::from_parts(types::TURN_END, json!({"by": "x"})).is_err());
    }

    #[test]
    fn unknown_outcome_and_policy_are_refused() {
        let err = Event::from_parts(
            types::APPROVAL_DECIDED,
            json!({"id": "q", "outcome": "maybe"}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown variant `maybe`"), "{err}");
        let err =
            Event::from_parts(types::APPROVAL_POLICY, json!({"policy": "sometimes"})).unwrap_err();
        assert!(
            err.to_string().contains("unknown variant `sometimes`"),
            "{err}"
        );
    }
}
