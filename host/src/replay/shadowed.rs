//! `approval-host shadow report`: what the shadow plugins said on live traffic, read back from
//! the session logs' `approval/shadowed` records: each shadow version's agreement with the real
//! decisions, and every disagreement with the question it was about.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::report::argument_line;
use crate::audit::error::LogError;
use crate::audit::event::{Asked, Event, Shadowed, Would};
use crate::audit::store::{Store, parse_lines};

/// A disagreement, with the question it was about.
#[derive(Debug, Clone)]
pub struct Disagreement {
    /// The session.
    pub session: String,
    /// The seq of the question's `approval/asked`.
    pub seq: u64,
    /// When it was asked.
    pub ts: String,
    /// The tool.
    pub tool: String,
    /// A short line of the call's arguments, as recorded.
    pub arguments: String,
    /// What the shadow said.
    pub shadowed: Shadowed,
    /// Who decided for real.
    pub answerer: Option<String>,
}

/// One shadow version's figures.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Questions it answered or failed on.
    pub seen: u64,
    /// Where it agreed.
    pub agreed: u64,
    /// Where it failed, by failure kind.
    pub failed: BTreeMap<String, u64>,
    /// Where it disagreed, in log order.
    pub disagreements: Vec<Disagreement>,
}

impl Figures {
    /// Agreed over agreed and disagreed.
    pub fn agreement(&self) -> Option<f64> {
        let answered = self.agreed + self.disagreements.len() as u64;
        (answered > 0).then(|| self.agreed as f64 / answered as f64)
    }
}

/// Every shadow version's figures, keyed by (name, digest).
#[derive(Debug, Clone, Default)]
pub struct ShadowReport {
    /// The sessions read.
    pub sessions: u64,
    /// Per shadow version.
    pub shadows: BTreeMap<(String, String), Figures>,
}

/// Reads every session's `approval/shadowed` records at or after `since`.
///
/// # Errors
/// A log that cannot be read or parsed.
pub fn read(store: &dyn Store, since: Option<SystemTime>) -> Result<ShadowReport, LogError> {
    let mut report = ShadowReport::default();
    for session in store.list()? {
        if crate::audit::store::is_ledger(&session) {
            continue;
        }
        report.sessions += 1;
        let bytes = store.read(&session)?;
        let records = parse_lines(&session, &bytes)?;
        let mut asked: HashMap<&str, (&Asked, u64, &str)> = HashMap::new();
        let mut answerers: HashMap<&str, Option<&str>> = HashMap::new();
        let mut calls: HashMap<&str, &Value> = HashMap::new();
        for record in &records {
            match &record.event {
                Event::Asked(a) => {
                    asked.insert(&a.id, (a, record.seq, &record.ts));
                }
                Event::Decided(d) => {
                    answerers.insert(&d.id, d.answerer.as_deref());
                }
                Event::ToolCall(c) => {
                    calls.insert(&c.call_id, &c.arguments);
                }
                Event::Shadowed(s) => {
                    let at = humantime::parse_rfc3339(&record.ts).ok();
                    if since.is_some_and(|since| at.is_none_or(|at| at < since)) {
                        continue;
                    }
                    let figures = report
                        .shadows
                        .entry((s.plugin.clone(), s.digest.clone().unwrap_or_default()))
                        .or_default();
                    figures.seen += 1;
                    match s.agrees {
                        Some(true) => figures.agreed += 1,
                        None => {
                            let kind = s
                                .failure
                                .map_or_else(|| "failed".to_owned(), |k| k.to_string());
                            *figures.failed.entry(kind).or_default() += 1;
                        }
                        Some(false) => {
                            let (question, seq, ts) = asked
                                .get(s.id.as_str())
                                .map_or((None, 0, ""), |(a, seq, ts)| (Some(*a), *seq, *ts));
                            let arguments = question
                                .and_then(|q| q.call_id.as_deref())
                                .and_then(|c| calls.get(c).copied());
                            figures.disagreements.push(Disagreement {
                                session: session.clone(),
                                seq,
                                ts: ts.to_owned(),
                                tool: question.map_or_else(String::new, |q| q.tool_name.clone()),
                                arguments: argument_line(arguments, 80),
                                shadowed: s.clone(),
                                answerer: answerers
                                    .get(s.id.as_str())
                                    .copied()
                                    .flatten()
                                    .map(str::to_owned),
                            });
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(report)
}

fn percent(agreement: Option<f64>) -> String {
    agreement.map_or_else(|| "-".to_owned(), |a| format!("{:.1}%", a * 100.0))
}

fn would(s: &Shadowed) -> String {
    match (&s.would, &s.reason) {
        (Would::Failed, _) => "failed".to_owned(),
        (w, Some(r)) => format!("{w} ({r})"),
        (w, None) => w.to_string(),
    }
}

impl ShadowReport {
    /// Whether any shadow disagreed.
    pub fn any_disagreement(&self) -> bool {
        self.shadows.values().any(|f| !f.disagreements.is_empty())
    }

    /// The report for people.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        if self.shadows.is_empty() {
            let _ = writeln!(out, "no shadow answers in {} sessions", self.sessions);
            return out;
        }
        for ((name, digest), f) in &self.shadows {
            let failed: u64 = f.failed.values().sum();
            let _ = writeln!(
                out,
                "{name} ({}): {} seen, {} agreed, {} disagreed, {failed} failed: agreement {}",
                digest.get(..12).unwrap_or(digest),
                f.seen,
                f.agreed,
                f.disagreements.len(),
                percent(f.agreement())
            );
            for (kind, n) in &f.failed {
                let _ = writeln!(out, "  failed ({kind}): {n}");
            }
            for d in &f.disagreements {
                let _ = writeln!(
                    out,
                    "  {}  {}  {}  {}  decided {} by {}, would be {}   (approval-host log {}  # seq {})",
                    d.session,
                    d.ts,
                    d.tool,
                    d.arguments,
                    d.shadowed.decided,
                    d.answerer.as_deref().unwrap_or("nobody"),
                    would(&d.shadowed),
                    d.session,
                    d.seq
                );
            }
        }
        out
    }

    /// The report as JSON, for tools.
    pub fn to_json(&self) -> Value {
        json!({
            "sessions": self.sessions,
            "shadows": self.shadows.iter().map(|((name, digest), f)| json!({
                "name": name, "digest": digest, "seen": f.seen, "agreed": f.agreed,
                "disagreed": f.disagreements.len(), "failed": f.failed,
                "agreement": f.agreement(),
                "disagreements": f.disagreements.iter().map(|d| json!({
                    "session": d.session, "seq": d.seq, "ts": d.ts, "tool": d.tool,
                    "arguments": d.arguments, "decided": d.shadowed.decided,
                    "answerer": d.answerer, "would": d.shadowed.would, "reason": d.shadowed.reason,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}
