//! The Sessions pages: every session log the store holds, summarised (policy, open turn, last
//! activity, how its questions ended), and one session's timeline, filterable by outcome and
//! tool, each question linkable (`/sessions/<id>#q-<question>`).
//!
//! The pages read the logs through the [`Store`] the host writes them with, the way
//! `approval-host log` does: nothing here opens a log for writing. A summary is kept while the
//! log's length is unchanged, so a page over many idle sessions rereads only the ones that grew.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::pages::{self, Tab};
use super::visible::visible;
use super::{Console, Viewer};
use crate::audit::check::check_bytes;
use crate::audit::event::{Event, McpHandled, Record, UnaskedWhy};
use crate::audit::store::{Store, validate_session_id};
use crate::outcome::Outcome;
use crate::policy::Policy;

/// The most sessions the list shows unless asked for all (most recent first).
pub const LIST_LIMIT: usize = 200;

/// The alarm over the sessions list when a call ran that no question allowed.
pub const UNASKED_ALARM: &str =
    "Tool calls ran unasked (a before-tool hook failed, was skipped, or its refusal was ignored):";

/// The most timeline entries a session's page shows unless asked for all (the latest).
pub const TIMELINE_LIMIT: usize = 500;

/// What the list shows of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The session id.
    pub id: String,
    /// Records in its log.
    pub records: usize,
    /// The time of its last record (RFC 3339), empty for an empty log.
    pub last_activity: String,
    /// Whether a turn is open.
    pub turn_open: bool,
    /// A policy switched in the session, overriding the deployment's default.
    pub policy: Option<Policy>,
    /// Started for a subagent.
    pub delegated: bool,
    /// Questions by outcome, in [`Outcome::ALL`] order.
    pub outcomes: [usize; 4],
    /// The tools it asked about.
    pub tools: BTreeSet<String>,
    /// The first thing wrong with the log, as `log` would report it.
    pub problem: Option<String>,
    /// That problem is only a question waiting for its decision (normal while the session is
    /// open).
    pub undecided: bool,
    /// Calls its log records as run without a question that allowed them (`approval/unasked`).
    pub unasked: usize,
}

fn outcome_index(o: Outcome) -> usize {
    Outcome::ALL.iter().position(|x| *x == o).unwrap_or(0)
}

fn summarise(id: &str, bytes: &[u8]) -> Summary {
    let checked = check_bytes(bytes);
    let mut s = Summary {
        id: id.to_owned(),
        records: checked.records.len(),
        last_activity: checked
            .records
            .last()
            .map(|r| r.ts.to_string())
            .unwrap_or_default(),
        turn_open: false,
        policy: None,
        delegated: false,
        outcomes: [0; 4],
        tools: BTreeSet::new(),
        problem: checked.problem.as_ref().map(ToString::to_string),
        undecided: checked.undecided,
        unasked: 0,
    };
    let mut fold = crate::audit::fold::SessionFold::new();
    for r in &checked.records {
        fold.apply(r.seq, &r.event);
        match &r.event {
            Event::Asked(a) => {
                s.tools.insert(a.tool_name.clone());
            }
            Event::Decided(d) => s.outcomes[outcome_index(d.outcome)] += 1,
            Event::Unasked(_) => s.unasked += 1,
            _ => {}
        }
    }
    s.turn_open = fold.turn_open();
    s.policy = fold.policy_override().map(|p| p.policy);
    s.delegated = fold.delegated();
    s
}

/// Session summaries, kept while their logs do not grow.
#[derive(Default)]
pub struct Summaries {
    known: Mutex<HashMap<String, (u64, Arc<Summary>)>>,
}

impl Summaries {
    /// Every session log's summary (rules logs left out), most recent activity first.
    pub fn all(
        &self,
        store: &dyn Store,
    ) -> Result<Vec<Arc<Summary>>, crate::audit::error::LogError> {
        let mut out = Vec::new();
        for (id, len) in store.list_lens()? {
            if crate::audit::store::is_ledger(&id) {
                continue;
            }
            let cached = len.and_then(|len| {
                let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
                known
                    .get(&id)
                    .filter(|(l, _)| *l == len)
                    .map(|(_, s)| s.clone())
            });
            let summary = match cached {
                Some(s) => s,
                None => {
                    let s = Arc::new(summarise(&id, &store.read(&id)?));
                    if let Some(len) = len {
                        self.known
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(id.clone(), (len, s.clone()));
                    }
                    s
                }
            };
            out.push(summary);
        }
        out.sort_by(|a, b| b.last_activity.cmp(&a.last_activity).then(a.id.cmp(&b.id)));
        Ok(out)
    }
}

/// The filters of the list and the timeline (`?outcome=rejected&tool=bash`); empty means any.
#[derive(Debug, Default, Deserialize)]
pub struct Filters {
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    tool: String,
    /// Present: no limit on how much is shown.
    #[serde(default)]
    all: Option<String>,
}

impl Filters {
    /// The query of these filters with everything shown.
    fn all_href(&self, path: &str) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        if !self.outcome.is_empty() {
            query.append_pair("outcome", &self.outcome);
        }
        if !self.tool.is_empty() {
            query.append_pair("tool", &self.tool);
        }
        query.append_pair("all", "1");
        format!("{path}?{}", query.finish())
    }

    fn limit(&self, limit: usize) -> usize {
        if self.all.is_some() {
            usize::MAX
        } else {
            limit
        }
    }

    fn outcome(&self) -> Result<Option<Outcome>, String> {
        if self.outcome.is_empty() {
            return Ok(None);
        }
        self.outcome.parse().map(Some).map_err(|e| format!("{e}"))
    }

    fn tool(&self) -> Option<&str> {
        (!self.tool.is_empty()).then_some(self.tool.as_str())
    }
}

fn store_failed(e: impl std::fmt::Display) -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("the session logs could not be read: {e}"),
    )
        .into_response()
}

/// The list of sessions.
pub async fn list(
    State(console): State<Arc<Console>>,
    viewer: Viewer,
    Query(filters): Query<Filters>,
) -> Response {
    let outcome = match filters.outcome() {
        Ok(o) => o,
        Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
    };
    let store = console.server.service().store();
    let c = console.clone();
    let all = match tokio::task::spawn_blocking(move || c.sessions.all(&*store)).await {
        Ok(Ok(all)) => all,
        Ok(Err(e)) => return store_failed(e),
        Err(e) => return store_failed(e),
    };
    let agents = console.server.service().open_sessions().await;
    // Only what the viewer may see feeds the page: its filters and counts too.
    let visible: Vec<_> = all.into_iter().filter(|s| viewer.sees(&s.id)).collect();
    let tools: BTreeSet<String> = visible
        .iter()
        .flat_map(|s| s.tools.iter().cloned())
        .collect();
    let shown: Vec<_> = visible
        .into_iter()
        .filter(|s| outcome.is_none_or(|o| s.outcomes[outcome_index(o)] > 0))
        .filter(|s| filters.tool().is_none_or(|t| s.tools.contains(t)))
        .collect();
    let default = console.server.service().default_policy();
    let alarms: Vec<&Arc<Summary>> = shown.iter().filter(|s| s.unasked > 0).collect();
    let unasked: usize = alarms.iter().map(|s| s.unasked).sum();
    pages::page(
        "Sessions",
        Some(&viewer),
        Tab::Sessions,
        html! {
            h1 { "Sessions (" (shown.len()) ")" }
            @if !alarms.is_empty() {
                p.error.alarm {
                    (UNASKED_ALARM) " " (unasked) " in "
                    @for (i, s) in alarms.iter().enumerate() {
                        @if i > 0 { ", " }
                        a href=(format!("/sessions/{}", s.id)) { (s.id) }
                    }
                }
            }
            (filter_form("/sessions", &filters, &tools))
            @if shown.is_empty() { p.empty { "No session matches." } }
            @else {
                @if shown.len() > filters.limit(LIST_LIMIT) {
                    p.hint { "The " (LIST_LIMIT) " most recent of " (shown.len()) " are shown: "
                        a href=(filters.all_href("/sessions")) { "show all" } }
                }
                table.wide.sessions {
                    thead { tr {
                        th { "session" } th { "agent" } th { "policy" } th { "turn" } th { "last activity" }
                        @for o in Outcome::ALL { th { (o.as_str()) } }
                    } }
                    tbody {
                        @for s in shown.iter().take(filters.limit(LIST_LIMIT)) {
                            tr id=(format!("s-{}", s.id)) {
                                td { a href=(format!("/sessions/{}", s.id)) { (s.id) }
                                    @if s.delegated { " (subagent)" }
                                    @if let Some(p) = s.problem.as_ref().filter(|_| !(s.undecided && agents.contains_key(&s.id))) {
                                        br; span.error { "fails its check: " (p) }
                                    }
                                    @if s.unasked > 0 { br; span.error { (s.unasked) " ran unasked" } } }
                                td { (agents.get(&s.id).filter(|a| !a.is_empty()).map_or_else(|| "-".to_owned(), |a| a.join(", "))) }
                                td { (s.policy.unwrap_or(default).as_str()) @if s.policy.is_none() { " (default)" } }
                                td { @if s.turn_open { "open" } @else { "-" } }
                                td { (s.last_activity) }
                                @for (i, o) in Outcome::ALL.iter().enumerate() {
                                    td class=(format!("num outcome-{}", o.as_str())) { (s.outcomes[i]) }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
    .into_response()
}

fn filter_form(action: &str, filters: &Filters, tools: &BTreeSet<String>) -> Markup {
    html! {
        form.filters method="get" action=(action) {
            label { "outcome "
                select name="outcome" {
                    option value="" selected[filters.outcome.is_empty()] { "any" }
                    @for o in Outcome::ALL {
                        option value=(o.as_str()) selected[filters.outcome == o.as_str()] { (o.as_str()) }
                    }
                }
            }
            label { "tool "
                select name="tool" {
                    option value="" selected[filters.tool.is_empty()] { "any" }
                    @for t in tools { option value=(t) selected[&filters.tool == t] { (t) } }
                }
            }
            button type="submit" { "Filter" }
        }
    }
}

/// One session's timeline.
pub async fn timeline(
    State(console): State<Arc<Console>>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(filters): Query<Filters>,
) -> Response {
    if let Err(e) = validate_session_id(&id) {
        return (StatusCode::BAD_REQUEST, e.to_string()).into_response();
    }
    if !viewer.sees(&id) {
        return (
            StatusCode::FORBIDDEN,
            format!("token {:?} may not see session {id:?}", viewer.name()),
        )
            .into_response();
    }
    let outcome = match filters.outcome() {
        Ok(o) => o,
        Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
    };
    let store = console.server.service().store();
    let sid = id.clone();
    let bytes = match tokio::task::spawn_blocking(move || store.read(&sid)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => return store_failed(e),
        Err(e) => return store_failed(e),
    };
    if bytes.is_empty() {
        return (StatusCode::NOT_FOUND, format!("no session {id:?}")).into_response();
    }
    let checked = check_bytes(&bytes);
    // A question being asked right now is not a fault.
    let live = console
        .server
        .service()
        .open_sessions()
        .await
        .contains_key(&id);
    let problem = checked
        .problem
        .as_ref()
        .filter(|_| !(checked.undecided && live));
    let items = items(&checked.records);
    let tools: BTreeSet<String> = items
        .iter()
        .filter_map(|i| match i {
            Item::Question { tool, .. } | Item::Call { tool, .. } => Some(tool.clone()),
            Item::Other(_) => None,
        })
        .collect();
    let matching: Vec<&Item> = items
        .iter()
        .filter(|i| i.matches(outcome, filters.tool()))
        .collect();
    // The latest entries: a long-lived session's page stays a page.
    let shown = &matching[matching.len().saturating_sub(filters.limit(TIMELINE_LIMIT))..];
    pages::page(
        &id,
        Some(&viewer),
        Tab::Sessions,
        html! {
            h1 { "Session " code { (id) } }
            p { a href="/sessions" { "All sessions" } }
            @if let Some(p) = problem { p.error { "This log fails its check: " (p) } }
            (filter_form(&format!("/sessions/{id}"), &filters, &tools))
            @if shown.len() < matching.len() {
                p.hint { "The last " (shown.len()) " of " (matching.len()) " entries are shown: "
                    a href=(filters.all_href(&format!("/sessions/{id}"))) { "show all" } }
            }
            ol.timeline {
                @for item in shown { (item.render()) }
            }
        },
    )
    .into_response()
}

/// A line of the timeline: a question with its decision, a tool call with its result, or any
/// other record.
enum Item<'a> {
    Question {
        asked: &'a Record,
        tool: String,
        decided: Option<&'a Record>,
    },
    Call {
        call: &'a Record,
        tool: String,
        result: Option<&'a Record>,
    },
    Other(&'a Record),
}

fn items(records: &[Record]) -> Vec<Item<'_>> {
    let mut decided = HashMap::new();
    let mut results = HashMap::new();
    for r in records {
        match &r.event {
            Event::Decided(d) => {
                decided.insert(d.id.as_str(), r);
            }
            Event::ToolResult(t) => {
                results.insert(t.call_id.as_str(), r);
            }
            _ => {}
        }
    }
    records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Asked(a) => Some(Item::Question {
                asked: r,
                tool: a.tool_name.clone(),
                decided: decided.get(a.id.as_str()).copied(),
            }),
            Event::ToolCall(c) => Some(Item::Call {
                call: r,
                tool: c.name.clone(),
                result: results.get(c.call_id.as_str()).copied(),
            }),
            // Shown with their question or call.
            Event::Decided(_) | Event::ToolResult(_) => None,
            _ => Some(Item::Other(r)),
        })
        .collect()
}

impl Item<'_> {
    fn matches(&self, outcome: Option<Outcome>, tool: Option<&str>) -> bool {
        let tool_ok = |t: &str| tool.is_none_or(|want| want == t);
        match self {
            Item::Question {
                tool: t, decided, ..
            } => {
                tool_ok(t)
                    && outcome.is_none_or(|o| {
                        decided.is_some_and(
                            |d| matches!(&d.event, Event::Decided(d) if d.outcome == o),
                        )
                    })
            }
            Item::Call { tool: t, .. } => outcome.is_none() && tool_ok(t),
            Item::Other(_) => outcome.is_none() && tool.is_none(),
        }
    }

    fn render(&self) -> Markup {
        match self {
            Item::Question { asked, decided, .. } => {
                let Event::Asked(a) = &asked.event else {
                    return html! {};
                };
                let d = decided.and_then(|r| match &r.event {
                    Event::Decided(d) => Some(d),
                    _ => None,
                });
                html! {
                    li.question id=(format!("q-{}", a.id)) {
                        span.ts { (asked.ts) } " asked about " code { (visible(&a.tool_name)) }
                        @if let Some(c) = &a.call_id { " (call " (visible(c)) ")" }
                        " "
                        a href=(format!("#q-{}", a.id)) title="link to this question" { "#" }
                        @if let Some(r) = &a.reason { br; "asker's reason: " q { (visible(r)) } }
                        br;
                        @match d {
                            None => { b.outcome-unavailable { "not decided yet" } }
                            Some(d) => {
                                b class=(format!("outcome-{}", d.outcome.as_str())) { (d.outcome.as_str()) }
                                @if let Some(by) = &d.answerer { " by " code { (by) } }
                                @if let Some(digest) = &d.digest { " (digest " code.digest { (digest.get(..12).unwrap_or(digest)) } ")" }
                                @if let Some(f) = &d.failure {
                                    " failure: " (f.kind.as_str())
                                    @if let Some(p) = &f.plugin { " in " code { (p) } }
                                }
                                @if let Some(r) = &d.reason { br; "reason: " q { (visible(r)) } }
                                @if let Some(rule) = &d.rule { br; "by rule " code { (rule.rule) } " (" (rule.scope.as_str()) ", " (rule.creator) ")" }
                                @if let Some(added) = &d.rule_added { br; "rule kept: " code { (added) } }
                                @if let Some(declined) = &d.rule_declined { br; "rule declined: " (declined) }
                            }
                        }
                    }
                }
            }
            Item::Call { call, result, .. } => {
                let Event::ToolCall(c) = &call.event else {
                    return html! {};
                };
                let arguments = serde_json::to_string_pretty(&c.arguments).unwrap_or_default();
                html! {
                    li.call id=(format!("c-{}", c.call_id)) {
                        span.ts { (call.ts) } " tool call " code { (visible(&c.name)) } " (call " (visible(&c.call_id)) ")"
                        details { summary { "arguments" } pre { (visible(&arguments)) } }
                        @if let Some(Record { event: Event::ToolResult(t), ts, .. }) = result {
                            (ts) " result: " @if t.is_error { b.outcome-rejected { "error" } } @else { "ok" }
                            @if let Some(l) = &t.failed_listener { " (failed listener " code { (l) } ")" }
                            details { summary { "content" } pre { (visible(&serde_json::to_string_pretty(&t.content).unwrap_or_default())) } }
                        }
                    }
                }
            }
            Item::Other(r) => {
                let kind = r.event.kind();
                let data = r.event.data();
                html! {
                    li.turn[matches!(r.event, Event::TurnStart) || r.event.ends_turn()] {
                        span.ts { (r.ts) } " "
                        @match &r.event {
                            Event::TurnStart => "turn started",
                            Event::TurnEnd => "turn ended",
                            Event::TurnEndBy(_) => "turn ended by the host that took the session over",
                            Event::Policy(p) => { "policy " b { (p.policy.as_str()) }
                                @if let Some(s) = &p.source { " (" (s) ")" } }
                            Event::Unasked(u) => { b.outcome-rejected { "ran unasked" } " "
                                code { (visible(&u.tool_name)) }
                                @if let Some(c) = &u.call_id { " (call " (visible(c)) ")" }
                                @match u.why {
                                    UnaskedWhy::NotAsked => " with no question: its before-tool hook failed, timed out or was skipped",
                                    UnaskedWhy::Refused => " although its question refused it",
                                    UnaskedWhy::NotAnswered => " although its question was never answered: its hook stopped before it could",
                                }
                                @if let Some(q) = &u.question { " " a href=(format!("#q-{q}")) { "(the question)" } }
                                @if let Some(args) = &u.arguments {
                                    details { summary { "arguments" } pre { (visible(&serde_json::to_string_pretty(args).unwrap_or_default())) } }
                                } }
                            Event::McpMessage(m) => { "MCP " (m.from_text()) " " code { (visible(&m.method)) } " "
                                @if m.handled == McpHandled::Passed { "passed on" } @else { b.outcome-rejected { (m.handled_text()) } }
                                @if let Some(why) = &m.why { ": " (visible(why)) } }
                            _ => { code { (kind) } " " (data.to_string()) }
                        }
                    }
                }
            }
        }
    }
}
