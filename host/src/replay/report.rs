//! What a replay found: each replayed question's recorded and replayed decision, summed up as a
//! table (recorded × replayed), the changed questions grouped by who decides now and who decided
//! before, plugin failures, and what could not be replayed; printed for people or as JSON, with
//! the exit status a CI job gates on.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::audit::event::{Decided, FailureRecord};
use crate::outcome::Outcome;
use crate::service::Verdict;

/// Exit status: nothing changed.
pub const EXIT_SAME: u8 = 0;
/// Exit status: a question would now be decided differently.
pub const EXIT_CHANGED: u8 = 1;
/// Exit status: a question that was not allowed without a person would now be allowed.
pub const EXIT_NEWLY_ALLOWED: u8 = 3;

/// The column of a question that passes every gate in the replay: a person or client would be
/// asked (the replay has none).
pub const WOULD_ASK: &str = "would ask";
/// The row prefix of a recorded question a person (or a client) answered.
pub const PERSON: &str = "person";
/// The row of a recorded question no answerer took (every gate passed it on, nobody was there).
pub const NOBODY: &str = "nobody answered";

/// How a decision compares: what it allowed, and whether a person was (or would be) asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Allowed in process (a rule, a plugin).
    Allowed,
    /// Rejected in process (a rule, a plugin, policy `never`, a protection).
    Rejected,
    /// Unavailable in process (a gate said so, or failed).
    Unavailable,
    /// Left to a person or client: answered by one when recorded, would be asked when replayed.
    Asked,
}

impl Kind {
    fn of_outcome(outcome: Outcome) -> Kind {
        match outcome {
            Outcome::AllowedOnce => Kind::Allowed,
            Outcome::Rejected => Kind::Rejected,
            // A cancelled question is never compared (see `Skipped::cancelled`).
            Outcome::Unavailable | Outcome::Cancelled => Kind::Unavailable,
        }
    }
}

/// One side of a comparison: the outcome, who decided, and how it compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The outcome.
    pub outcome: Outcome,
    /// How it compares.
    pub kind: Kind,
    /// Who decided, as a person reads it (`rule:deployment-2`, `plugin no-secrets`, `person via
    /// web`, `policy never`, `nobody`, `plugin slow failed (timeout)`).
    pub by: String,
    /// What the decider said.
    pub reason: Option<String>,
}

impl Decision {
    /// The recorded decision.
    pub fn recorded(d: &Decided) -> Decision {
        let unanswered =
            d.outcome == Outcome::Unavailable && d.answerer.is_none() && d.failure.is_none();
        let kind = if d.outside || unanswered {
            Kind::Asked
        } else {
            Kind::of_outcome(d.outcome)
        };
        let by = if d.outside {
            format!("{PERSON} via {}", d.answerer.as_deref().unwrap_or("?"))
        } else {
            decider(d.outcome, d.answerer.as_deref(), d.failure.as_ref())
        };
        Decision {
            outcome: d.outcome,
            kind,
            by,
            reason: d.reason.clone(),
        }
    }

    /// The replayed decision.
    pub fn replayed(v: &Verdict) -> Decision {
        let unanswered =
            v.outcome == Outcome::Unavailable && v.answerer.is_none() && v.failure.is_none();
        Decision {
            outcome: v.outcome,
            kind: if unanswered {
                Kind::Asked
            } else {
                Kind::of_outcome(v.outcome)
            },
            by: decider(v.outcome, v.answerer.as_deref(), v.failure.as_ref()),
            reason: v.reason.clone(),
        }
    }

    /// The row label of a recorded decision.
    fn row(&self) -> String {
        match (self.kind, self.by.starts_with(PERSON)) {
            (Kind::Asked, true) => format!("{PERSON}: {}", self.outcome),
            (Kind::Asked, false) => NOBODY.to_owned(),
            _ => self.outcome.to_string(),
        }
    }

    /// The column label of a replayed decision.
    fn column(&self) -> String {
        match self.kind {
            Kind::Asked => WOULD_ASK.to_owned(),
            _ => self.outcome.to_string(),
        }
    }

    fn to_json(&self) -> Value {
        let mut v = json!({"outcome": self.outcome, "by": self.by});
        if let Some(r) = &self.reason {
            v["reason"] = json!(r);
        }
        v
    }
}

fn decider(outcome: Outcome, answerer: Option<&str>, failure: Option<&FailureRecord>) -> String {
    match (answerer, failure) {
        (_, Some(f)) => format!(
            "{} failed ({})",
            f.plugin
                .as_deref()
                .map_or_else(|| "the host".to_owned(), |p| format!("plugin {p}")),
            f.kind
        ),
        (Some(a), None) if a.starts_with("rule:") => a.to_owned(),
        (Some(a), None) => format!("plugin {a}"),
        (None, None) if outcome == Outcome::Rejected => "policy never".to_owned(),
        (None, None) => "nobody".to_owned(),
    }
}

/// One recorded question and what the replay decided.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// The session.
    pub session: String,
    /// The seq of its `approval/asked`.
    pub seq: u64,
    /// When it was asked (RFC 3339, as recorded).
    pub ts: String,
    /// The recorded question id.
    pub id: String,
    /// The tool.
    pub tool: String,
    /// A short line of the call's arguments, as recorded.
    pub arguments: String,
    /// What was decided.
    pub recorded: Decision,
    /// What the replay decided.
    pub replayed: Decision,
    /// The pointers of argument values the log holds redacted, when a gate read the arguments
    /// in the replay (so it decided on `[redacted]`, not on the value).
    pub redacted_read: Vec<String>,
    /// The plugin whose failure settled the replayed question, and how it failed.
    pub failure: Option<(String, String)>,
}

impl Replayed {
    /// Whether the replay decides it differently.
    pub fn changed(&self) -> bool {
        self.recorded.kind != self.replayed.kind
    }

    /// Whether the replay allows in process what was not allowed in process before (rejected,
    /// unavailable, or left to a person).
    pub fn newly_allowed(&self) -> bool {
        self.replayed.kind == Kind::Allowed && self.recorded.kind != Kind::Allowed
    }
}

/// Questions the replay did not compare.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Cancelled before anyone decided: there is no decision to compare.
    pub cancelled: u64,
    /// Asked and never settled (a log still being written, or cut).
    pub unsettled: u64,
    /// Recorded before format 2: the record does not say which agent asked, from where, in
    /// which sandbox mode, so it cannot be asked again as it was.
    pub before_format_2: u64,
    /// Asked before `--since`.
    pub before_since: u64,
}

/// Everything a replay found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The deployment replayed against, as named in messages.
    pub deployment: String,
    /// The sessions read.
    pub sessions: u64,
    /// The questions replayed, in session order then log order.
    pub questions: Vec<Replayed>,
    /// The questions not compared.
    pub skipped: Skipped,
}

impl Report {
    /// The changed questions.
    pub fn changed(&self) -> impl Iterator<Item = &Replayed> {
        self.questions.iter().filter(|q| q.changed())
    }

    /// The exit status: [`EXIT_NEWLY_ALLOWED`], else [`EXIT_CHANGED`], else [`EXIT_SAME`].
    pub fn exit_code(&self) -> u8 {
        if self.questions.iter().any(Replayed::newly_allowed) {
            EXIT_NEWLY_ALLOWED
        } else if self.questions.iter().any(Replayed::changed) {
            EXIT_CHANGED
        } else {
            EXIT_SAME
        }
    }

    /// Recorded × replayed, with counts, rows and columns in a fixed order.
    pub fn table(&self) -> BTreeMap<(String, String), u64> {
        let mut table = BTreeMap::new();
        for q in &self.questions {
            *table
                .entry((q.recorded.row(), q.replayed.column()))
                .or_default() += 1;
        }
        table
    }

    /// The changed questions grouped by who decides now and who decided before, the largest
    /// group first.
    pub fn groups(&self) -> Vec<((&Decision, &Decision), Vec<&Replayed>)> {
        let mut groups: BTreeMap<(String, Kind, String, Kind), Vec<&Replayed>> = BTreeMap::new();
        for q in self.changed() {
            groups
                .entry((
                    q.replayed.by.clone(),
                    q.replayed.kind,
                    q.recorded.by.clone(),
                    q.recorded.kind,
                ))
                .or_default()
                .push(q);
        }
        let mut out: Vec<_> = groups
            .into_values()
            .map(|qs| ((&qs[0].replayed, &qs[0].recorded), qs))
            .collect();
        out.sort_by_key(|g| std::cmp::Reverse(g.1.len()));
        out
    }

    /// Plugin failures in the replay: plugin, kind, count.
    pub fn failures(&self) -> BTreeMap<(String, String), u64> {
        let mut failures = BTreeMap::new();
        for (plugin, kind) in self.questions.iter().filter_map(|q| q.failure.clone()) {
            *failures.entry((plugin, kind)).or_default() += 1;
        }
        failures
    }

    /// The report for people.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let changed = self.changed().count();
        let newly = self.questions.iter().filter(|q| q.newly_allowed()).count();
        let _ = writeln!(
            out,
            "replayed {} questions from {} sessions against {}",
            self.questions.len(),
            self.sessions,
            self.deployment
        );
        let s = &self.skipped;
        for (n, why) in [
            (s.cancelled, "cancelled before a decision"),
            (s.unsettled, "never settled"),
            (
                s.before_format_2,
                "recorded before format 2 (no agent, cwd or sandbox mode): not replayed",
            ),
            (s.before_since, "asked before --since"),
        ] {
            if n > 0 {
                let _ = writeln!(out, "skipped {n}: {why}");
            }
        }
        let table = self.table();
        if !table.is_empty() {
            let mut rows: Vec<&String> = table.keys().map(|(r, _)| r).collect();
            rows.dedup();
            let mut columns: Vec<&String> = table.keys().map(|(_, c)| c).collect();
            columns.sort();
            columns.dedup();
            let head = "recorded \\ replayed";
            let width = rows
                .iter()
                .map(|r| r.len())
                .max()
                .unwrap_or(0)
                .max(head.len());
            let _ = write!(out, "\n{head:<width$}");
            for c in &columns {
                let _ = write!(out, "  {c:>13}");
            }
            out.push('\n');
            for r in rows {
                let _ = write!(out, "{r:<width$}");
                for c in &columns {
                    let n = table.get(&(r.clone(), (*c).clone())).copied().unwrap_or(0);
                    let _ = write!(out, "  {n:>13}");
                }
                out.push('\n');
            }
        }
        let _ = writeln!(out, "\nchanged: {changed} ({newly} newly allowed)");
        for ((now, before), qs) in self.groups() {
            let _ = writeln!(
                out,
                "\n{} now: {} {} (before: {} {})",
                qs.len(),
                now.by,
                now.column(),
                before.by,
                before.outcome
            );
            if let Some(r) = &now.reason {
                let _ = writeln!(out, "  now says: {r}");
            }
            for q in qs {
                let _ = writeln!(
                    out,
                    "  {}  {}  {}  {}   (approval-host log {}  # seq {})",
                    q.session, q.ts, q.tool, q.arguments, q.session, q.seq
                );
            }
        }
        let failures = self.failures();
        if !failures.is_empty() {
            let _ = writeln!(out, "\nplugin failures in the replay:");
            for ((plugin, kind), n) in failures {
                let _ = writeln!(out, "  {plugin}  {kind}  {n}");
            }
        }
        let redacted: Vec<&Replayed> = self
            .questions
            .iter()
            .filter(|q| !q.redacted_read.is_empty())
            .collect();
        if !redacted.is_empty() {
            let _ = writeln!(
                out,
                "\ndecided on redacted arguments (a gate read \"{}\" where the value was): {}",
                crate::audit::redact::REDACTED,
                redacted.len()
            );
            for q in redacted {
                let _ = writeln!(
                    out,
                    "  {} seq {}: {}",
                    q.session,
                    q.seq,
                    q.redacted_read.join(", ")
                );
            }
        }
        out
    }

    /// The report as JSON, for tools.
    pub fn to_json(&self) -> Value {
        let question = |q: &Replayed| {
            json!({
                "session": q.session, "seq": q.seq, "ts": q.ts, "id": q.id,
                "tool": q.tool, "arguments": q.arguments,
                "recorded": q.recorded.to_json(), "replayed": q.replayed.to_json(),
                "newlyAllowed": q.newly_allowed(),
            })
        };
        json!({
            "deployment": self.deployment,
            "sessions": self.sessions,
            "questions": self.questions.len(),
            "changed": self.changed().count(),
            "newlyAllowed": self.questions.iter().filter(|q| q.newly_allowed()).count(),
            "table": self.table().into_iter().map(|((recorded, replayed), count)| {
                json!({"recorded": recorded, "replayed": replayed, "count": count})
            }).collect::<Vec<_>>(),
            "changes": self.groups().into_iter().map(|((now, before), qs)| json!({
                "now": now.by, "nowOutcome": now.column(),
                "before": before.by, "beforeOutcome": before.outcome,
                "questions": qs.into_iter().map(question).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "failures": self.failures().into_iter().map(|((plugin, kind), count)| {
                json!({"plugin": plugin, "kind": kind, "count": count})
            }).collect::<Vec<_>>(),
            "skipped": {
                "cancelled": self.skipped.cancelled,
                "unsettled": self.skipped.unsettled,
                "beforeFormat2": self.skipped.before_format_2,
                "beforeSince": self.skipped.before_since,
            },
            "redacted": self.questions.iter().filter(|q| !q.redacted_read.is_empty()).map(|q| json!({
                "session": q.session, "seq": q.seq, "pointers": q.redacted_read,
            })).collect::<Vec<_>>(),
            "exit": self.exit_code(),
        })
    }
}

/// A short, one-line view of a call's arguments: the command, path or URL when it has one,
/// else its JSON, at most `max` characters, control characters escaped.
pub fn argument_line(arguments: Option<&Value>, max: usize) -> String {
    let Some(arguments) = arguments else {
        return String::new();
    };
    let text = ["command", "file_path", "path", "url"]
        .iter()
        .find_map(|k| arguments.get(k).and_then(Value::as_str))
        .map_or_else(|| arguments.to_string(), str::to_owned);
    let mut line = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
    }
    if line.chars().count() > max {
        line = line.chars().take(max.saturating_sub(1)).collect();
        line.push('…');
    }
    line
}
