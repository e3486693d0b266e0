//! The pure fold over a session's events: what the log says now (open turn, open questions,
//! policy override, recorded tool calls) and the rules an event must pass before it is committed.
//!
//! The same fold validates appends, rebuilds state when a log is reopened, and checks a log for
//! the `log` command, so the three can never disagree.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use crate::audit::event::{Event, PolicySwitch, RuleAdded, SandboxModeName, SandboxSwitch};
use crate::audit::question_key::QuestionKey;
use crate::policy::Policy;
use crate::policy::SOURCE_DELEGATION;

/// A rule an event broke; the event is refused and nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// `turn/start` while a turn is open.
    #[error("turn/start while a turn is already open")]
    TurnAlreadyOpen,
    /// `turn/end` with no open turn.
    #[error("turn/end without an open turn")]
    NoTurnToEnd,
    /// `turn/end` while questions are still open.
    #[error("turn/end while {0} approval question(s) are still open")]
    TurnEndWithOpenQuestions(usize),
    /// An approval event outside an open turn.
    #[error("{0} outside an open turn")]
    OutsideTurn(&'static str),
    /// `approval/asked` with an empty `toolName`.
    #[error("approval/asked with an empty toolName")]
    EmptyToolName,
    /// `approval/unasked` with an empty `toolName`.
    #[error("approval/unasked with an empty toolName")]
    EmptyUnaskedTool,
    /// `approval/asked` with an empty `id`.
    #[error("approval/asked with an empty id")]
    EmptyId,
    /// `approval/asked` reusing an id already asked in this session.
    #[error("approval/asked repeats id {0:?}")]
    RepeatedId(String),
    /// `approval/decided` for an id with no open `approval/asked`.
    #[error("approval/decided for id {0:?}, which has no open approval/asked")]
    DecidedWithoutAsked(String),
    /// `tool/call` with an empty call id or name.
    #[error("tool/call with an empty {0}")]
    EmptyToolCallField(&'static str),
    /// `rule/added` with an empty id or tool.
    #[error("rule/added with an empty {0}")]
    EmptyRuleField(&'static str),
    /// `rule/added` reusing the id of a rule in this log.
    #[error("rule/added repeats id {0:?}")]
    RepeatedRule(String),
    /// `approval/shadowed` for an id that is not a settled question of this log.
    #[error("approval/shadowed for id {0:?}, which is not a settled question")]
    ShadowedUnsettled(String),
    /// `rule/revoked` for a rule this log does not hold active.
    #[error("rule/revoked for {0:?}, which is not an active rule of this log")]
    UnknownRule(String),
    /// An event whose record would nest its JSON deeper than a log line may
    /// ([`MOST_NESTING`](crate::audit::event::MOST_NESTING)): written, it could not be
    /// read back.
    #[error("its JSON nests more than {most} levels deep (the call's arguments, most likely), deeper than a log line may", most = crate::audit::event::MOST_NESTING)]
    TooDeep(&'static str),
}

/// An open approval question as the log knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenQuestion {
    /// The question id.
    pub id: String,
    /// The `seq` of its `approval/asked` record.
    pub seq: u64,
}

/// The state of one session, folded from its events. It is serialized only into a session's kept
/// fold ([`crate::audit::kept`]), whose format changes with the host's version.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionFold {
    turn_open: bool,
    /// Every question id asked, and the open ones with their `approval/asked` seq: keyed so that
    /// the host's own ids cost no allocation.
    #[serde(with = "asked_keys")]
    asked: HashSet<QuestionKey>,
    #[serde(with = "pairs")]
    open: HashMap<QuestionKey, u64>,
    policy: Option<PolicySwitch>,
    tool_calls: HashMap<String, Arguments>,
    sandbox: Option<SandboxSwitch>,
    /// Still reading the delegation seed at the head of the log (only `delegation` switches so far).
    in_seed: bool,
    /// The log opens with a delegation seed: the session was started as a subagent.
    delegated: bool,
    /// Whether call arguments are kept (not when only checking a log: they can be large).
    keep_calls: bool,
    /// Every rule this log added, by id, with whether it was revoked since.
    rules: BTreeMap<String, (RuleAdded, bool)>,
}

impl Default for SessionFold {
    fn default() -> Self {
        SessionFold {
            turn_open: false,
            asked: HashSet::new(),
            open: HashMap::new(),
            policy: None,
            tool_calls: HashMap::new(),
            sandbox: None,
            in_seed: true,
            delegated: false,
            keep_calls: true,
            rules: BTreeMap::new(),
        }
    }
}

impl SessionFold {
    /// An empty session.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty session for checking a log: the same rules, without keeping call arguments.
    pub fn checking() -> Self {
        SessionFold {
            keep_calls: false,
            ..Self::default()
        }
    }

    /// Checks `event` against the rules without applying it.
    pub fn check(&self, event: &Event) -> Result<(), Violation> {
        match event {
            Event::TurnStart if self.turn_open => Err(Violation::TurnAlreadyOpen),
            Event::TurnStart => Ok(()),
            Event::TurnEnd | Event::TurnEndBy(_) if !self.turn_open => Err(Violation::NoTurnToEnd),
            Event::TurnEnd | Event::TurnEndBy(_) if !self.open.is_empty() => {
                Err(Violation::TurnEndWithOpenQuestions(self.open.len()))
            }
            Event::TurnEnd | Event::TurnEndBy(_) => Ok(()),
            Event::Asked(a) => {
                if !self.turn_open {
                    Err(Violation::OutsideTurn(event.kind()))
                } else if a.tool_name.is_empty() {
                    Err(Violation::EmptyToolName)
                } else if a.id.is_empty() {
                    Err(Violation::EmptyId)
                } else if self.asked.contains(&QuestionKey::of(&a.id)) {
                    Err(Violation::RepeatedId(a.id.clone()))
                } else {
                    Ok(())
                }
            }
            Event::Decided(d) => {
                if !self.turn_open {
                    Err(Violation::OutsideTurn(event.kind()))
                } else if !self.open.contains_key(&QuestionKey::of(&d.id)) {
                    Err(Violation::DecidedWithoutAsked(d.id.clone()))
                } else {
                    Ok(())
                }
            }
            Event::ToolCall(c) if c.call_id.is_empty() => {
                Err(Violation::EmptyToolCallField("callId"))
            }
            Event::ToolCall(c) if c.name.is_empty() => Err(Violation::EmptyToolCallField("name")),
            Event::RuleAdded(r) if r.id.is_empty() => Err(Violation::EmptyRuleField("id")),
            Event::RuleAdded(r) if r.tool.trim().is_empty() => {
                Err(Violation::EmptyRuleField("tool"))
            }
            Event::RuleAdded(r) if self.rules.contains_key(&r.id) => {
                Err(Violation::RepeatedRule(r.id.clone()))
            }
            Event::RuleRevoked(r) if !matches!(self.rules.get(&r.id), Some((_, false))) => {
                Err(Violation::UnknownRule(r.id.clone()))
            }
            // A shadow may finish after its question's turn ended, but never before the decision.
            Event::Shadowed(s)
                if {
                    let key = QuestionKey::of(&s.id);
                    !self.asked.contains(&key) || self.open.contains_key(&key)
                } =>
            {
                Err(Violation::ShadowedUnsettled(s.id.clone()))
            }
            Event::Unasked(u) if u.tool_name.is_empty() => Err(Violation::EmptyUnaskedTool),
            Event::ToolCall(_)
            | Event::ToolResult(_)
            | Event::Unasked(_)
            | Event::McpMessage(_)
            | Event::McpPinned(_)
            | Event::McpPinWanted(_)
            | Event::Shadowed(_)
            | Event::Policy(_)
            | Event::HookInvoked(_)
            | Event::HookResult(_)
            | Event::Sandbox(_)
            | Event::RuleAdded(_)
            | Event::RuleRevoked(_) => Ok(()),
        }
    }

    /// Applies an event that passed [`SessionFold::check`]; `seq` is its record's position.
    pub fn apply(&mut self, seq: u64, event: &Event) {
        let seed = match event {
            Event::Policy(p) => p.source.as_deref() == Some(SOURCE_DELEGATION),
            Event::Sandbox(s) => s.source.as_deref() == Some(SOURCE_DELEGATION),
            _ => false,
        };
        self.in_seed &= seed;
        if self.in_seed && matches!(event, Event::Policy(_)) {
            self.delegated = true;
        }
        match event {
            Event::TurnStart => self.turn_open = true,
            Event::TurnEnd | Event::TurnEndBy(_) => self.turn_open = false,
            Event::Asked(a) => {
                let key = QuestionKey::of(&a.id);
                self.open.insert(key.clone(), seq);
                self.asked.insert(key);
            }
            Event::Decided(d) => {
                self.open.remove(&QuestionKey::of(&d.id));
            }
            Event::Policy(p) => self.policy = Some(p.clone()),
            Event::ToolCall(c) if self.keep_calls => {
                self.tool_calls
                    .insert(c.call_id.clone(), Arguments::Value(c.arguments.clone()));
            }
            Event::Sandbox(s) => self.sandbox = Some(s.clone()),
            Event::RuleAdded(r) => {
                self.rules.insert(r.id.clone(), (r.clone(), false));
            }
            Event::RuleRevoked(r) => {
                if let Some((_, revoked)) = self.rules.get_mut(&r.id) {
                    *revoked = true;
                }
            }
            Event::ToolCall(_)
            | Event::ToolResult(_)
            | Event::Unasked(_)
            | Event::McpMessage(_)
            | Event::McpPinned(_)
            | Event::McpPinWanted(_)
            | Event::Shadowed(_)
            | Event::HookInvoked(_)
            | Event::HookResult(_) => {}
        }
    }

    /// Checks then applies.
    pub fn push(&mut self, seq: u64, event: &Event) -> Result<(), Violation> {
        self.check(event)?;
        self.apply(seq, event);
        Ok(())
    }

    /// The rules this log added and has not revoked (expiry is the reader's business: it needs a
    /// clock, and a fold must replay the same whenever it runs).
    pub fn rules(&self) -> impl Iterator<Item = &RuleAdded> {
        self.rules
            .values()
            .filter(|(_, revoked)| !revoked)
            .map(|(r, _)| r)
    }

    /// Whether the last `turn/start` is not followed by `turn/end`.
    pub fn turn_open(&self) -> bool {
        self.turn_open
    }

    /// The session's own policy switch, if any: the last `approval/policy` event.
    pub fn policy_override(&self) -> Option<&PolicySwitch> {
        self.policy.as_ref()
    }

    /// The effective policy over a deployment default.
    pub fn effective_policy(&self, default: Policy) -> Policy {
        self.policy.as_ref().map_or(default, |p| p.policy)
    }

    /// Questions asked and not yet decided, oldest first.
    pub fn open_questions(&self) -> Vec<OpenQuestion> {
        let mut v: Vec<_> = self
            .open
            .iter()
            .map(|(key, seq)| OpenQuestion {
                id: key.id(),
                seq: *seq,
            })
            .collect();
        v.sort_by_key(|q| q.seq);
        v
    }

    /// The session's own sandbox mode, if switched: the last `sandbox/mode` event.
    pub fn sandbox_mode(&self) -> Option<SandboxModeName> {
        self.sandbox.as_ref().map(|s| s.mode)
    }

    /// The session's own sandbox switch, if any: the last `sandbox/mode` event.
    pub fn sandbox_override(&self) -> Option<&SandboxSwitch> {
        self.sandbox.as_ref()
    }

    /// Whether the log opens with a delegation seed (`approval/policy {source: "delegation"}`,
    /// maybe after `sandbox/mode {source: "delegation"}`): the session was started for a subagent.
    pub fn delegated(&self) -> bool {
        self.delegated
    }

    /// This fold with the arguments of the calls in `written` as given there: what a log holds
    /// for calls it wrote with `[audit] redact`'s values replaced, while this fold kept what the
    /// agent sent.
    pub fn with_calls_as_written(&self, written: &HashMap<String, Value>) -> SessionFold {
        let mut fold = self.clone();
        for (call, arguments) in written {
            if let Some(held) = fold.tool_calls.get_mut(call) {
                *held = Arguments::Value(arguments.clone());
            }
        }
        fold
    }

    /// The arguments of the recorded `tool/call` with this call id (the latest, if repeated).
    pub fn call_arguments(&self, call_id: &str) -> Option<Value> {
        self.tool_calls.get(call_id).and_then(Arguments::value)
    }
}

/// A recorded call's arguments: as the event carried them, or as a kept fold holds them (their JSON
/// text, read only when a plugin asks for them: most never are, and reading every call's
/// arguments would cost an open of a long session what the kept fold saves).
#[derive(Debug, Clone)]
enum Arguments {
    Value(Value),
    Text(Box<serde_json::value::RawValue>),
}

impl serde::Serialize for Arguments {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Arguments::Value(value) => value.serialize(serializer),
            Arguments::Text(text) => text.serialize(serializer),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Arguments {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<serde_json::value::RawValue>::deserialize(deserializer).map(Arguments::Text)
    }
}

impl Arguments {
    fn value(&self) -> Option<Value> {
        match self {
            Arguments::Value(value) => Some(value.clone()),
            Arguments::Text(text) => match serde_json::from_str(text.get()) {
                Ok(value) => Some(value),
                Err(e) => {
                    // Written by this host from a value, sealed, and checked: not expected.
                    tracing::warn!(error = %e, "a kept call's arguments do not read");
                    None
                }
            },
        }
    }
}

impl PartialEq for Arguments {
    fn eq(&self, other: &Self) -> bool {
        self.value() == other.value()
    }
}

/// The question ids a session asked: the host's own (UUIDs) as one string of 32 hex digits each,
/// which reads back in a fraction of the time a list of numbers or strings does, and any other
/// id as written.
mod asked_keys {
    use std::collections::HashSet;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::audit::question_key::QuestionKey;

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Asked {
        uuids: String,
        other: Vec<Box<str>>,
    }

    pub fn serialize<S: Serializer>(
        keys: &HashSet<QuestionKey>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut asked = Asked {
            uuids: String::with_capacity(keys.len() * 32),
            other: Vec::new(),
        };
        for key in keys {
            match key {
                QuestionKey::Uuid(bits) => {
                    use std::fmt::Write as _;
                    let _ = write!(asked.uuids, "{bits:032x}");
                }
                QuestionKey::Other(id) => asked.other.push(id.clone()),
            }
        }
        asked.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<HashSet<QuestionKey>, D::Error> {
        let asked = Asked::deserialize(deserializer)?;
        if asked.uuids.len() % 32 != 0 {
            return Err(serde::de::Error::custom("uuids is not whole 32-digit ids"));
        }
        let mut keys = HashSet::with_capacity(asked.uuids.len() / 32 + asked.other.len());
        for chunk in asked.uuids.as_bytes().chunks_exact(32) {
            if !chunk
                .iter()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
            {
                return Err(serde::de::Error::custom(
                    "uuids holds other than lowercase hex",
                ));
            }
            let digits = std::str::from_utf8(chunk).map_err(serde::de::Error::custom)?;
            let bits = u128::from_str_radix(digits, 16).map_err(serde::de::Error::custom)?;
            keys.insert(QuestionKey::Uuid(bits));
        }
        keys.extend(asked.other.into_iter().map(QuestionKey::Other));
        Ok(keys)
    }
}

/// A map whose keys are not strings, serialized as a list of pairs (JSON keys must be strings).
mod pairs {
    use std::collections::HashMap;
    use std::hash::Hash;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        map: &HashMap<K, V>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(map.iter())
    }

    pub fn deserialize<'de, K, V, D>(deserializer: D) -> Result<HashMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Eq + Hash,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(deserializer)?
            .into_iter()
            .collect())
    }
}
