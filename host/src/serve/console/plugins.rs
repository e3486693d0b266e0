//! The Plugins page (admin): each plugin's state (loaded, failed with its error, quarantined and
//! for how long), digest, plugin API version and counters; each shadow's agreement with the real
//! decisions and its latest disagreements; and a reload of the deployment, as `plugins/reload`
//! does.

use std::sync::Arc;

use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use super::pages::{self, Tab};
use super::visible::visible;
use super::{Console, CsrfForm, Viewer};
use crate::plugin::mount::{PluginStatus, ReloadReport};
use crate::plugin::shadow::ShadowStatus;

/// The Plugins page, with what the login's last reload did once, right after it.
pub async fn page(State(console): State<Arc<Console>>, viewer: Viewer) -> Response {
    if let Err(refused) = viewer.check_admin() {
        return refused.into_response();
    }
    let reloaded = console.take_reloaded(&viewer);
    let plugins = console.server.plugin_status().await;
    let shadows = console.server.shadow_status();
    let status = match &reloaded {
        Some(Err(_)) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    };
    (
        status,
        plugins_page(&viewer, &plugins, &shadows, reloaded.as_ref()),
    )
        .into_response()
}

/// Reloads the deployment, then sends the browser to the Plugins page, which shows what
/// changed (post, redirect, get): refreshing that page never reloads again.
pub async fn reload(
    State(console): State<Arc<Console>>,
    viewer: Viewer,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Err(refused) = viewer.check_admin_form(&form.csrf) {
        return refused.into_response();
    }
    tracing::info!(user = viewer.name(), "reload asked on the console");
    // An invalid deployment file changes nothing; the page says why.
    let report = console.server.reload().await.map_err(|e| e.to_string());
    console.keep_reloaded(&viewer, report);
    Redirect::to("/plugins").into_response()
}

fn names(list: &[String]) -> String {
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}

/// A shadow's agreement as the page shows it.
fn agreement(s: &ShadowStatus) -> String {
    s.agreement
        .map_or_else(|| "-".to_owned(), |a| format!("{:.1}%", a * 100.0))
}

fn shadows_table(shadows: &[ShadowStatus]) -> Markup {
    html! {
        h2 { "Shadows (" (shadows.len()) ")" }
        p { "Each sees every settled question after its decision and has no say; "
            code { "approval-host shadow report" } " reads what they said from the logs." }
        table.wide.shadows {
            thead { tr {
                th { "shadow" } th { "digest" } th { "seen" } th { "agreed" } th { "disagreed" }
                th { "failed" } th { "dropped" } th { "agreement" }
            } }
            tbody {
                @for s in shadows {
                    tr id=(format!("s-{}", s.name)) {
                        td { code { (s.name) } }
                        td { code.digest title=(s.digest) { (s.digest.get(..12).unwrap_or(&s.digest)) } }
                        td.num { (s.seen) }
                        td.num { (s.agreed) }
                        td.num { (s.disagreed) }
                        td.num { (s.failed) }
                        td.num { (s.dropped) }
                        td.num.agreement { (agreement(s)) }
                    }
                }
            }
        }
        @for s in shadows {
            @if !s.recent.is_empty() {
                h3 { "Latest disagreements of " code { (s.name) } }
                table.wide.disagreements id=(format!("d-{}", s.name)) {
                    thead { tr { th { "session" } th { "tool" } th { "decided" } th { "by" } th { "would be" } th { "its reason" } } }
                    tbody {
                        @for d in s.recent.iter().rev() {
                            tr {
                                td { a href=(format!("/sessions/{}#q-{}", d.session, d.question)) { (visible(&d.session)) } }
                                td { (visible(&d.tool)) }
                                td { (d.decided) }
                                td { @match &d.answerer { Some(a) => (visible(a)), None => "nobody" } }
                                td { (d.would) }
                                td { @if let Some(r) = &d.reason { (visible(r)) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn plugins_page(
    viewer: &Viewer,
    plugins: &[PluginStatus],
    shadows: &[ShadowStatus],
    reloaded: Option<&Result<ReloadReport, String>>,
) -> Markup {
    pages::page(
        "Plugins",
        Some(viewer),
        Tab::Plugins,
        html! {
            h1 { "Plugins (" (plugins.len()) ")" }
            @match reloaded {
                Some(Ok(r)) => {
                    p.reloaded role="status" {
                        "Reloaded. Added: " (names(&r.added)) "; swapped: " (names(&r.swapped))
                        "; removed: " (names(&r.removed)) "."
                        @for (name, error) in &r.failed { br; span.error { (name) " failed to load: " (error) } }
                    }
                }
                Some(Err(e)) => { p.error role="alert" { "The deployment was not reloaded: " (e) } }
                None => {}
            }
            @if plugins.is_empty() { p.empty { "The deployment has no plugin." } }
            @else {
                table.wide.plugins {
                    thead { tr {
                        th { "plugin" } th { "role" } th { "state" } th { "API" } th { "digest" }
                        th { "decisions" } th { "failures" } th { "quarantined" } th { "reloads" }
                    } }
                    tbody {
                        @for p in plugins {
                            tr id=(format!("p-{}", p.name)) {
                                td { code { (p.name) } }
                                td { (p.role) }
                                td class=(format!("state-{}", p.state.as_str())) {
                                    (p.state.as_str())
                                    @if let Some(s) = p.quarantined_for_s { " for " (s) " s more" }
                                    @if let Some(e) = &p.error { br; span.error { (e) } }
                                }
                                td { (p.api_version.as_deref().unwrap_or("-")) }
                                td { code.digest title=[p.digest.as_deref()] { (p.digest.as_deref().map_or("-", |d| d.get(..12).unwrap_or(d))) } }
                                td.num { (p.counters.decisions) }
                                td.num { (p.counters.failures) }
                                td.num { (p.counters.quarantined) }
                                td.num { (p.counters.reloads) }
                            }
                        }
                    }
                }
            }
            @if !shadows.is_empty() { (shadows_table(shadows)) }
            form method="post" action="/plugins/reload" {
                input type="hidden" name="csrf" value=(viewer.csrf);
                button type="submit" { "Reload the deployment" }
            }
        },
    )
}
