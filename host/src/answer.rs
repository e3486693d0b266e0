//! What a listener says beyond its [`Decision`]: a reason written for the model and the user, and
//! a proposed standing rule (plugin API 0.2's `allow-always` / `reject-always`).
//!
//! A reason comes from a plugin the host does not trust, and ends up in the audit log, in a
//! Claude Code hook's output and in the text a model reads: [`clean_reason`] bounds it and strips
//! control characters before it goes anywhere.

use serde::{Deserialize, Serialize};

use crate::outcome::Decision;

/// The most of a reason the host keeps, in bytes (cut at a character boundary, then marked).
pub const MAX_REASON_BYTES: usize = 1024;

/// What ends a reason that was cut to [`MAX_REASON_BYTES`].
pub const CUT_MARKER: &str = "… [cut]";

/// The most of a proposed rule's tool or pattern the host keeps, in bytes; longer proposals are
/// refused (the call still gets its one-shot decision).
pub const MAX_RULE_FIELD_BYTES: usize = 1024;

/// Where a proposed standing rule applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuleScope {
    /// The asking session only.
    Session,
    /// Every session of this deployment.
    Project,
    /// Every deployment sharing the state directory.
    User,
}

impl RuleScope {
    /// The wire spelling: `session`, `project`, `user`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RuleScope::Session => "session",
            RuleScope::Project => "project",
            RuleScope::User => "user",
        }
    }
}

impl std::fmt::Display for RuleScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that names no rule scope or effect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {word:?} is not {expected}")]
pub struct UnknownWord {
    /// What it was meant to be: `scope`, `effect`.
    pub what: &'static str,
    /// The word.
    pub word: String,
    /// The words it may be.
    pub expected: &'static str,
}

impl std::str::FromStr for RuleScope {
    type Err = UnknownWord;

    /// `session`, `project` or `user`.
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        match s {
            "session" => Ok(RuleScope::Session),
            "project" => Ok(RuleScope::Project),
            "user" => Ok(RuleScope::User),
            other => Err(UnknownWord {
                what: "scope",
                word: other.to_owned(),
                expected: "\"session\", \"project\" or \"user\"",
            }),
        }
    }
}

/// Whether a rule allows or rejects the calls it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Effect {
    /// The matching calls are allowed, one at a time.
    Allow,
    /// The matching calls are rejected.
    Reject,
}

impl Effect {
    /// The wire spelling: `allow`, `reject`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Reject => "reject",
        }
    }
}

impl std::fmt::Display for Effect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Effect {
    type Err = UnknownWord;

    /// `allow` or `reject`.
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        match s {
            "allow" => Ok(Effect::Allow),
            "reject" => Ok(Effect::Reject),
            other => Err(UnknownWord {
                what: "effect",
                word: other.to_owned(),
                expected: "\"allow\" or \"reject\"",
            }),
        }
    }
}

/// A standing rule a listener proposed with its decision, as the `approval/decided` event records
/// it. Whether the host keeps it is the grants' business; the decision itself is one-shot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proposal {
    /// `allow` or `reject`.
    pub effect: Effect,
    /// The tool name or glob.
    pub tool: String,
    /// The argument pattern; absent for every call of the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Where it would apply.
    pub scope: RuleScope,
}

/// A rule's text, `Tool(pattern)`, or `Tool` for every call of the tool.
pub fn rule_text(tool: &str, pattern: Option<&str>) -> String {
    match pattern {
        Some(p) => format!("{tool}({p})"),
        None => tool.to_owned(),
    }
}

impl Proposal {
    /// The proposed rule's text, `Tool(pattern)`.
    pub fn text(&self) -> String {
        rule_text(&self.tool, self.pattern.as_deref())
    }
}

/// Why a proposed rule was refused. The call still gets the one-shot decision it implies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposalError {
    /// The tool is empty or blank.
    #[error("the proposed rule names no tool")]
    NoTool,
    /// A field is longer than [`MAX_RULE_FIELD_BYTES`].
    #[error("the proposed rule's {0} is longer than {MAX_RULE_FIELD_BYTES} bytes")]
    TooLong(&'static str),
    /// A field holds control characters.
    #[error("the proposed rule's {0} holds control characters")]
    ControlCharacters(&'static str),
}

impl Proposal {
    /// Checks a proposal a plugin made: a tool, both fields bounded and printable. An empty
    /// pattern means "every call of the tool", as an absent one does.
    pub fn checked(
        effect: Effect,
        tool: String,
        pattern: Option<String>,
        scope: RuleScope,
    ) -> Result<Proposal, ProposalError> {
        for (field, value) in [("tool", Some(&tool)), ("pattern", pattern.as_ref())] {
            let Some(value) = value else { continue };
            if value.len() > MAX_RULE_FIELD_BYTES {
                return Err(ProposalError::TooLong(field));
            }
            if value.chars().any(char::is_control) {
                return Err(ProposalError::ControlCharacters(field));
            }
        }
        if tool.trim().is_empty() {
            return Err(ProposalError::NoTool);
        }
        Ok(Proposal {
            effect,
            tool,
            pattern: pattern.filter(|p| !p.trim().is_empty()),
            scope,
        })
    }
}

/// Who stands behind an answer's proposed standing rule, which decides the scopes it may create
/// ([`crate::rules::proposals`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authority {
    /// A person at the host (the CLI, stdio, a local socket without tokens, an ACP editor) or a
    /// token with the admin role: any scope.
    Person,
    /// A token with the answerer role: session rules only.
    Answerer,
    /// An in-process plugin: the scopes the deployment lets plugins create.
    Plugin,
}

/// The standing rule that made a decision, as the `approval/decided` event names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleRef {
    /// The rule's id.
    pub id: String,
    /// `Tool(pattern)`.
    pub rule: String,
    /// Its scope.
    pub scope: RuleScope,
    /// Who made it (its source).
    pub creator: String,
}

/// A listener's full answer: the decision, and what it said about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// What was decided.
    pub decision: Decision,
    /// Why, for the model and the user (already [cleaned](clean_reason)).
    pub reason: Option<String>,
    /// A standing rule proposed with the decision.
    pub proposal: Option<Proposal>,
    /// The standing rule that decided (only the rule gate sets it).
    pub rule: Option<RuleRef>,
    /// Who answered, when one listener answers for several people (the web console:
    /// `web:<token name>`): the audit's `answerer` names them instead of the listener.
    pub by: Option<String>,
    /// Who stands behind `proposal`; when unsaid, an answerer outside the process counts as an
    /// answerer token and one inside as a plugin (the narrower reading).
    pub authority: Option<Authority>,
}

impl From<Decision> for Answer {
    fn from(decision: Decision) -> Self {
        Answer {
            decision,
            reason: None,
            proposal: None,
            rule: None,
            by: None,
            authority: None,
        }
    }
}

impl Answer {
    /// This answer, proposing `proposal` as a standing rule.
    #[must_use]
    pub fn proposing(mut self, proposal: Proposal) -> Answer {
        self.proposal = Some(proposal);
        self
    }

    /// This answer, said by someone with `authority` (which scopes its proposal may create).
    #[must_use]
    pub fn with_authority(mut self, authority: Authority) -> Answer {
        self.authority = Some(authority);
        self
    }

    /// A rejection with a reason (cleaned here).
    pub fn reject(reason: impl AsRef<str>) -> Answer {
        Answer {
            decision: Decision::Reject,
            reason: clean_reason(reason.as_ref()),
            proposal: None,
            rule: None,
            by: None,
            authority: None,
        }
    }
}

/// Bounds `reason` to [`MAX_REASON_BYTES`] (cut at a character boundary and ended with
/// [`CUT_MARKER`]), replaces control characters (newlines included: a reason is one line in
/// every text it reaches) with spaces, and trims it. `None` when nothing printable is left.
pub fn clean_reason(reason: &str) -> Option<String> {
    // Only what can survive the cut is looked at: a 100 MB reason costs a few microseconds.
    let mut end = reason.len().min(MAX_REASON_BYTES + 1);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let head = &reason[..end];
    let mut cleaned: String = head
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if reason.len() > MAX_REASON_BYTES {
        let mut keep = MAX_REASON_BYTES - CUT_MARKER.len();
        while !cleaned.is_char_boundary(keep) {
            keep -= 1;
        }
        cleaned.truncate(keep);
        let trimmed = cleaned.trim_end().len();
        cleaned.truncate(trimmed);
        cleaned.push_str(CUT_MARKER);
    }
    let trimmed = cleaned.trim();
    if trimmed.is_empty() {
        None
    } else if trimmed.len() == cleaned.len() {
        Some(cleaned)
    } else {
        Some(trimmed.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_one_bounded_printable_line() {
        assert_eq!(clean_reason("  no\nway\u{7}  ").as_deref(), Some("no way"));
        assert_eq!(clean_reason("\n\t "), None);
        let long = "é".repeat(MAX_REASON_BYTES);
        let cut = clean_reason(&long).unwrap();
        assert!(cut.len() <= MAX_REASON_BYTES, "{}", cut.len());
        assert!(cut.ends_with(CUT_MARKER));
        assert!(cut.starts_with("éé"));
        let exact = "a".repeat(MAX_REASON_BYTES);
        assert_eq!(clean_reason(&exact).as_deref(), Some(exact.as_str()));
    }

    #[test]
    fn proposals_are_bounded_and_name_a_tool() {
        let ok = Proposal::checked(
            Effect::Allow,
            "Bash".into(),
            Some(" ".into()),
            RuleScope::Session,
        )
        .unwrap();
        assert_eq!(ok.pattern, None);
        assert_eq!(
            Proposal::checked(Effect::Allow, " ".into(), None, RuleScope::User),
            Err(ProposalError::NoTool)
        );
        assert_eq!(
            Proposal::checked(
                Effect::Reject,
                "Bash".into(),
                Some("x".repeat(MAX_RULE_FIELD_BYTES + 1)),
                RuleScope::Project
            ),
            Err(ProposalError::TooLong("pattern"))
        );
        assert_eq!(
            Proposal::checked(Effect::Reject, "Ba\nsh".into(), None, RuleScope::Project),
            Err(ProposalError::ControlCharacters("tool"))
        );
    }
}
