//! The console's HTML (maud: every interpolated value is escaped), its script and its styles.
//! The pages work without JavaScript; the script only reloads the page when the pending set
//! changes.

use std::time::Instant;

use maud::{DOCTYPE, Markup, html};

use super::pending::Shown;

fn page(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · approval-host" }
                link rel="stylesheet" href="/console.css";
                script src="/console.js" defer {}
            }
            body { (body) }
        }
    }
}

/// The login form, with an error when the last attempt failed.
pub fn login(error: Option<&str>) -> Markup {
    page(
        "Log in",
        html! {
            main {
                h1 { "approval-host" }
                @if let Some(e) = error { p.error { (e) } }
                form method="post" action="/login" {
                    label for="token" { "Token" }
                    input #token type="password" name="token" autocomplete="off" required;
                    button type="submit" { "Log in" }
                }
            }
        },
    )
}

/// The questions waiting for a person.
pub fn pending(user: &str, csrf: &str, questions: &[Shown], now: Instant) -> Markup {
    page(
        "Pending",
        html! {
            header {
                span { "Signed in as " b { (user) } }
                form method="post" action="/logout" {
                    input type="hidden" name="csrf" value=(csrf);
                    button type="submit" { "Log out" }
                }
            }
            main #pending data-live="/events" {
                h1 { "Pending (" (questions.len()) ")" }
                @if questions.is_empty() { p.empty { "No question is waiting." } }
                @for q in questions {
                    article.question id=(format!("q-{}", q.id)) {
                        h2 { code { (q.tool) } }
                        dl {
                            dt { "agent" } dd { (q.agent) }
                            dt { "session" } dd { (q.session) }
                            @if let Some(c) = &q.call_id { dt { "call" } dd { (c) } }
                            @if let Some(r) = &q.reason { dt { "reason" } dd.reason { (r) } }
                            dt { "waiting" } dd { (now.saturating_duration_since(q.since).as_secs()) " s" }
                        }
                        @if let Some(a) = &q.arguments { details open { summary { "arguments" } pre.arguments { (a) } } }
                        form.answer method="post" action="/answer" {
                            input type="hidden" name="csrf" value=(csrf);
                            input type="hidden" name="id" value=(q.id);
                            button.allow type="submit" name="decision" value="allow-once" { "Allow once" }
                            input type="text" name="reason" placeholder="reason (for a rejection)" maxlength="1000";
                            button.reject type="submit" name="decision" value="reject" { "Reject" }
                        }
                    }
                }
            }
        },
    )
}

/// Reloads the page whenever the pending set changes (server-sent events).
pub const SCRIPT: &str = r#""use strict";
const live = document.querySelector("[data-live]");
if (live) {
  const events = new EventSource(live.dataset.live);
  events.addEventListener("changed", () => {
    // Keep a reason being typed: reload only when no field has focus.
    if (!document.activeElement || document.activeElement.tagName !== "INPUT") location.reload();
  });
}
"#;

/// Readable on a phone; no inline styles (the policy forbids them).
pub const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0 auto;max-width:60rem;padding:1rem}
header{display:flex;justify-content:space-between;align-items:center}
.question{border:1px solid #ccc;border-radius:.5rem;padding:.5rem 1rem;margin:1rem 0}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}dd{margin:0}
pre{white-space:pre-wrap;word-break:break-all;max-height:20rem;overflow:auto;background:#f6f6f6;padding:.5rem}
form.answer{display:flex;flex-wrap:wrap;gap:.5rem}form.answer input[type=text]{flex:1;min-width:10rem}
.error{color:#a00}button.allow{background:#2a7}button.reject{background:#c33}button{color:#fff;background:#456;border:0;padding:.5rem 1rem;border-radius:.3rem}
";
