//! The Pending page: the questions waiting for a person, answered with Allow once, Reject (with
//! a reason that reaches the model), or Always allow / Always reject with a standing rule the
//! person can edit first; and the live stream that keeps the page current.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use super::pages::{self, Tab, waited};
use super::pending::{Change, Click, Departed, Shown};
use super::visible::visible;
use super::{Console, Viewer};
use crate::answer::{Effect, RuleScope};
use crate::outcome::Decision;

/// Server-sent event names the page script listens for.
pub mod events {
    /// The first event of a stream; data: the version of the waiting set when it opened (a page
    /// of another version reloads).
    pub const HELLO: &str = "hello";
    /// A question arrived; data: its id.
    pub const ARRIVED: &str = "arrived";
    /// A question left; data: `{"id", "session", "tool", "ending"}`.
    pub const LEFT: &str = "left";
    /// The stream fell behind: reread the page.
    pub const RELOAD: &str = "reload";
}

/// The decisions a console form can send.
pub mod decisions {
    /// Allow this call.
    pub const ALLOW_ONCE: &str = "allow-once";
    /// Reject this call.
    pub const REJECT: &str = "reject";
    /// Allow this call and keep the rule.
    pub const ALLOW_ALWAYS: &str = "allow-always";
    /// Reject this call and keep the rule.
    pub const REJECT_ALWAYS: &str = "reject-always";
}

/// The Pending page.
pub async fn page(State(console): State<Arc<Console>>, viewer: Viewer) -> Markup {
    render(&console, &viewer, None)
}

fn render(console: &Console, viewer: &Viewer, error: Option<&str>) -> Markup {
    let version = console.pending.version();
    let questions: Vec<Shown> = console
        .pending
        .list()
        .into_iter()
        .filter(|q| viewer.sees(&q.session))
        .collect();
    let recent: Vec<Departed> = console
        .pending
        .recent()
        .into_iter()
        .filter(|d| viewer.sees(&d.session))
        .collect();
    pending_page(viewer, version, &questions, &recent, error, Instant::now())
}

#[derive(Deserialize)]
pub struct AnswerForm {
    csrf: String,
    id: String,
    decision: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    rule: String,
    #[serde(default)]
    scope: String,
}

/// A click on one of a question's buttons.
pub async fn answer(
    State(console): State<Arc<Console>>,
    viewer: Viewer,
    Form(form): Form<AnswerForm>,
) -> Response {
    if let Err(refused) = viewer.check_form(&form.csrf) {
        return refused.into_response();
    }
    let Some(shown) = console.pending.get(&form.id) else {
        return gone(&console, &viewer, &form.id);
    };
    if !viewer.sees(&shown.session) {
        return StatusCode::FORBIDDEN.into_response();
    }
    let (decision, always) = match form.decision.as_str() {
        decisions::ALLOW_ONCE => (Decision::AllowOnce, None),
        decisions::REJECT => (Decision::Reject, None),
        decisions::ALLOW_ALWAYS => (Decision::AllowOnce, Some(Effect::Allow)),
        decisions::REJECT_ALWAYS => (Decision::Reject, Some(Effect::Reject)),
        other => {
            return (
                StatusCode::BAD_REQUEST,
                format!("decision {other:?} is not one of the console's"),
            )
                .into_response();
        }
    };
    let proposal = match always {
        None => None,
        Some(effect) => {
            let scope = match form.scope.as_str() {
                "" => Ok(RuleScope::Project),
                other => other.parse::<RuleScope>(),
            };
            let scope = match scope {
                Ok(scope) => scope,
                Err(e) => {
                    let error = e.to_string();
                    return (
                        StatusCode::BAD_REQUEST,
                        render(&console, &viewer, Some(&error)),
                    )
                        .into_response();
                }
            };
            let vetted = crate::rules::proposal(form.rule.trim(), effect, scope)
                .map_err(|e| e.to_string())
                .and_then(|p| {
                    let call = crate::rules::pattern::Call {
                        tool: &shown.tool,
                        arguments: shown.call.as_ref(),
                        cwd: shown.cwd.as_deref(),
                        undeclared: &[],
                    };
                    crate::rules::proposals::vet(&p, viewer.authority(), &[], &call).map(|()| p)
                });
            match vetted {
                Ok(p) => Some(p),
                Err(e) => {
                    // The question keeps waiting; the person sees why and tries again.
                    let error = format!("rule: {e}");
                    return (
                        StatusCode::BAD_REQUEST,
                        render(&console, &viewer, Some(&error)),
                    )
                        .into_response();
                }
            }
        }
    };
    let reason = (!form.reason.trim().is_empty() && decision == Decision::Reject)
        .then(|| form.reason.trim().to_owned());
    let click = Click {
        decision,
        reason,
        proposal,
        user: viewer.name().to_owned(),
        authority: viewer.authority(),
    };
    if console.pending.answer(&form.id, click) {
        Redirect::to("/").into_response()
    } else {
        gone(&console, &viewer, &form.id)
    }
}

/// The reply to an answer for a question that is no longer waiting (answered by someone else,
/// cancelled or timed out meanwhile): the page again, saying how it ended.
fn gone(console: &Console, viewer: &Viewer, id: &str) -> Response {
    let ending = console
        .pending
        .recent()
        .into_iter()
        .find(|d| d.id == id && viewer.sees(&d.session))
        .map(|d| d.ending);
    let text = match ending {
        Some(ending) => format!("{ALREADY_SETTLED}: {ending}."),
        None => format!("{ALREADY_SETTLED}."),
    };
    (StatusCode::CONFLICT, render(console, viewer, Some(&text))).into_response()
}

/// What a person reads who answers a question that was settled meanwhile.
pub const ALREADY_SETTLED: &str = "That question is no longer waiting";

/// The live stream: arrivals and departures of the questions the viewer may see.
pub async fn events(State(console): State<Arc<Console>>, viewer: Viewer) -> Response {
    let most = console
        .server
        .inner
        .admission
        .limits()
        .console_streams_per_login;
    let Some(slot) = super::limits::stream_slot(&viewer.streams, most) else {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            super::limits::TOO_MANY_STREAMS,
        )
            .into_response();
    };
    // Subscribed before the version is read: nothing after it is missed.
    let mut changes = console.pending.subscribe();
    let version = console.pending.version();
    let stream = channel_stream(move |tx| async move {
        let _slot = slot;
        let hello = Event::default()
            .event(events::HELLO)
            .data(version.to_string());
        if tx.send(Ok::<_, Infallible>(hello)).await.is_err() {
            return;
        }
        loop {
            // A page that went away ends its task now, not at the next change.
            // So does a login that ended (logout) or whose token was revoked.
            let change = tokio::select! {
                change = changes.recv() => change,
                () = tx.closed() => break,
                () = viewer.ended.cancelled() => break,
                () = viewer.grant.revoked.cancelled() => break,
            };
            let event = match change {
                Ok(change) if !viewer.sees(change.session()) => continue,
                Ok(Change::Arrived { id, .. }) => Event::default().event(events::ARRIVED).data(id),
                Ok(Change::Left(d)) => Event::default().event(events::LEFT).data(
                    serde_json::json!({
                        "id": d.id, "session": d.session, "tool": d.tool, "ending": d.ending,
                    })
                    .to_string(),
                ),
                // Browsers drop an event whose data is empty.
                Err(RecvError::Lagged(n)) => {
                    Event::default().event(events::RELOAD).data(n.to_string())
                }
                Err(RecvError::Closed) => break,
            };
            if tx.send(Ok::<_, Infallible>(event)).await.is_err() {
                break;
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A stream fed by a task through a small channel (ends when the task does or the client goes).
fn channel_stream<T, F, Fut>(producer: F) -> impl futures_util::Stream<Item = T> + Send + 'static
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(producer(tx));
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
}

/// The banner of a Pending page whose live updates were refused for good: its login ended.
pub const LOGIN_LOST: &str = "This page is no longer live: your login has ended (logged out, its token revoked, or the server restarted).";

/// The questions waiting for a person, and the ones that just left.
pub fn pending_page(
    viewer: &Viewer,
    version: u64,
    questions: &[Shown],
    recent: &[Departed],
    error: Option<&str>,
    now: Instant,
) -> Markup {
    pages::page(
        "Pending",
        Some(viewer),
        Tab::Pending,
        html! {
            @if let Some(e) = error { p.error role="alert" { (e) } }
            section #pending data-live="/events" data-version=(version) {
                h1 { "Pending " span #count { "(" (questions.len()) ")" } }
                p.hint { "Keys: " kbd { "j" } " / " kbd { "k" } " move, " kbd { "a" } " allows once, "
                    kbd { "r" } " rejects (type a reason, then Enter)." }
                p #stale.banner hidden { "New questions arrived: " a href="/" { "reload" } }
                p #lost.banner role="alert" hidden { (LOGIN_LOST) " " a href="/login" { "Log in again" } }
                @if questions.is_empty() { p.empty { "No question is waiting." } }
                @for (i, q) in questions.iter().enumerate() {
                    (question(viewer, q, i == 0, now))
                }
            }
            section {
                h2 { "Just settled" }
                ul #recent {
                    @for d in recent {
                        li id=(format!("left-{}", d.id)) {
                            code { (visible(&d.tool)) } " (" a href=(format!("/sessions/{}#q-{}", d.session, d.id)) { (d.session) } "): " (d.ending)
                        }
                    }
                }
            }
        },
    )
}

fn question(viewer: &Viewer, q: &Shown, first: bool, now: Instant) -> Markup {
    html! {
        article.question.selected[first] id=(format!("q-{}", q.id)) {
            h2 { code { (visible(&q.tool)) } }
            dl {
                dt { "agent" } dd { (visible(&q.agent)) }
                dt { "session" } dd { a href=(format!("/sessions/{}", q.session)) { (q.session) } }
                @if let Some(c) = &q.call_id { dt { "call" } dd { (visible(c)) } }
                @if let Some(r) = &q.reason { dt { "reason" } dd.reason { (visible(r)) } }
                dt { "waiting" } dd.waited { (waited(now.saturating_duration_since(q.since))) }
                dt { "passed by" } dd.passed {
                    @if q.passed.is_empty() { "no gate" } @else { (q.passed.join(", ")) " (each said next)" }
                }
            }
            // Whole, never folded: what is approved is all of it (a long value scrolls).
            @if let Some(a) = &q.arguments {
                section.arguments {
                    h3 { "arguments (" (a.len()) " bytes)" }
                    pre.arguments tabindex="0" { (visible(a)) }
                }
            }
            div.answers {
                form.allow method="post" action="/answer" {
                    (hidden(viewer, &q.id))
                    button.allow type="submit" name="decision" value=(decisions::ALLOW_ONCE) { "Allow once" }
                }
                // Its own form: Enter in the reason field rejects, never allows.
                form.reject method="post" action="/answer" {
                    (hidden(viewer, &q.id))
                    input type="text" name="reason" placeholder="reason (reaches the model)" maxlength="1000" aria-label="reason";
                    button.reject type="submit" name="decision" value=(decisions::REJECT) { "Reject" }
                }
            }
            // Offered only when a rule narrow enough to be safe exists; a person may still edit it.
            @if let Some(offer) = &q.offer {
                details.always {
                    summary { "Always…" }
                    @for (decision, label, class) in [(decisions::ALLOW_ALWAYS, "Always allow", "allow"), (decisions::REJECT_ALWAYS, "Always reject", "reject")] {
                        form.always method="post" action="/answer" {
                            (hidden(viewer, &q.id))
                            label { "rule " input type="text" name="rule" value=(offer) required maxlength="2048"; }
                            label { "scope "
                                select name="scope" {
                                    // Wider scopes are for people at the host and admins.
                                    @if viewer.is_admin() {
                                        option value="session" { "this session" }
                                        option value="project" selected { "this project" }
                                        option value="user" { "every project (user)" }
                                    } @else {
                                        option value="session" selected { "this session" }
                                    }
                                }
                            }
                            @if decision == decisions::REJECT_ALWAYS {
                                input type="text" name="reason" placeholder="reason (reaches the model)" maxlength="1000" aria-label="reason";
                            }
                            button class=(class) type="submit" name="decision" value=(decision) { (label) }
                        }
                    }
                }
            }
        }
    }
}

fn hidden(viewer: &Viewer, id: &str) -> Markup {
    html! {
        input type="hidden" name="csrf" value=(viewer.csrf);
        input type="hidden" name="id" value=(id);
    }
}
