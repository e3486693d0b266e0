//! The Pins page (admin): each MCP server's pinned tool definitions, and each definition the
//! gateway withholds shown beside its pin, line by line, with a button that approves it
//! (recorded as `mcp/pinned` by `web:<user>`, as `approval-host mcp pins approve` does). A pin
//! decides what every session's agent may call, so only an admin of every session approves.

use std::sync::Arc;

use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::pages::{self, Tab};
use super::visible::visible;
use super::{Console, Viewer};
use crate::audit::store::PINS_LOG_PREFIX;
use crate::mcp::pins::{self, PinBook};

/// What an admin limited to some sessions is told when approving.
pub const NEEDS_FULL_ADMIN: &str = "approving an MCP tool definition needs an admin of every session: a pin decides what every session's agent may call";

/// One server's ledger as the page shows it, or why it cannot be read.
struct Server {
    name: String,
    book: Result<PinBook, String>,
}

/// The Pins page.
pub async fn page(State(console): State<Arc<Console>>, viewer: Viewer) -> Response {
    if let Err(refused) = viewer.check_admin() {
        return refused.into_response();
    }
    render(&console, &viewer, None).await.into_response()
}

async fn render(console: &Console, viewer: &Viewer, error: Option<&str>) -> Markup {
    let service = console.server.service();
    let store = service.store();
    let listed = tokio::task::spawn_blocking(move || store.list())
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    let names: Vec<String> = match listed {
        Ok(names) => names
            .into_iter()
            .filter(|n| n.starts_with(PINS_LOG_PREFIX))
            .collect(),
        Err(e) => return pins_page(viewer, &[], Some(&e)),
    };
    let mut servers = Vec::with_capacity(names.len());
    for name in names {
        let book = service
            .read_ledger(&name)
            .await
            .map(|l| PinBook::from_records(&l.records))
            .map_err(|e| e.to_string());
        servers.push(Server {
            name: name[PINS_LOG_PREFIX.len()..].to_owned(),
            book,
        });
    }
    pins_page(viewer, &servers, error)
}

/// The approve form.
#[derive(Debug, Deserialize)]
pub struct ApproveForm {
    csrf: String,
    server: String,
    tool: String,
    hash: String,
}

/// Approves one withheld definition, then back to the page (post, redirect, get).
pub async fn approve(
    State(console): State<Arc<Console>>,
    viewer: Viewer,
    Form(form): Form<ApproveForm>,
) -> Response {
    if let Err(refused) = viewer.check_admin_form(&form.csrf) {
        return refused.into_response();
    }
    if viewer.grant.is_limited() {
        return (
            StatusCode::FORBIDDEN,
            render(&console, &viewer, Some(NEEDS_FULL_ADMIN)).await,
        )
            .into_response();
    }
    if let Err(e) = crate::mcp::check_server_name(&form.server) {
        return (
            StatusCode::BAD_REQUEST,
            render(&console, &viewer, Some(&e.to_string())).await,
        )
            .into_response();
    }
    let by = format!("web:{}", viewer.name());
    let service = console.server.service();
    match pins::approve(service, &form.server, &form.tool, Some(&form.hash), &by).await {
        Ok(_) => {
            tracing::info!(user = viewer.name(), server = %form.server, tool = %form.tool, hash = %form.hash, "an MCP tool definition approved on the console");
            Redirect::to("/pins").into_response()
        }
        Err(e) => (
            StatusCode::BAD_REQUEST,
            render(&console, &viewer, Some(&e.to_string())).await,
        )
            .into_response(),
    }
}

fn short(hash: &str) -> &str {
    hash.get(..19).unwrap_or(hash)
}

fn pins_page(viewer: &Viewer, servers: &[Server], error: Option<&str>) -> Markup {
    pages::page(
        "Pins",
        Some(viewer),
        Tab::Pins,
        html! {
            h1 { "Pinned MCP tools" }
            @if let Some(e) = error { p.error role="alert" { (e) } }
            p { "A tool's definition (its description, schemas and annotations) is listed to agents only as pinned. "
                "A definition that changed, or one no person approved yet under " code { "pin = \"ask\"" }
                ", is withheld and its calls refused until it is approved here or with "
                code { "approval-host mcp pins approve" } "." }
            @if servers.is_empty() { p.empty { "No MCP gateway has pinned a tool yet." } }
            @for server in servers {
                h2 id=(format!("server-{}", server.name)) { "Server " code { (visible(&server.name)) } }
                @match &server.book {
                    Err(why) => { p.error role="alert" { (pins::unreadable(&server.name, why)) } }
                    Ok(book) => { (server_tables(viewer, &server.name, book)) }
                }
            }
        },
    )
}

fn server_tables(viewer: &Viewer, server: &str, book: &PinBook) -> Markup {
    let mut pinned: Vec<_> = book.pinned.iter().collect();
    pinned.sort_by(|a, b| a.0.cmp(b.0));
    let waiting = book.waiting();
    html! {
        @for w in &waiting {
            section.withheld id=(format!("w-{}-{}", server, short(&w.hash))) {
                h3 { "Withheld: " code { (visible(&w.tool)) } " "
                    @match &w.pinned {
                        Some(p) => { "changed from " code.digest title=(p.hash) { (short(&p.hash)) } }
                        None => "never pinned",
                    }
                    " → " code.digest title=(w.hash) { (short(&w.hash)) } }
                @let before = w.pinned.as_ref().map(|p| pins::pretty(&p.definition)).unwrap_or_default();
                @let after = pins::pretty(&w.definition);
                table.diff {
                    thead { tr { th { "pinned" } th { "now" } } }
                    tbody {
                        @for row in pins::side_by_side(&before, &after) {
                            @match row {
                                None => { tr.gap { td { "…" } td { "…" } } }
                                Some(r) => {
                                    tr.changed[r.changed] {
                                        td.del[r.changed && r.left.is_some()] { pre { (visible(r.left.as_deref().unwrap_or(""))) } }
                                        td.ins[r.changed && r.right.is_some()] { pre { (visible(r.right.as_deref().unwrap_or(""))) } }
                                    }
                                }
                            }
                        }
                    }
                }
                form method="post" action="/pins/approve" {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    input type="hidden" name="server" value=(server);
                    input type="hidden" name="tool" value=(w.tool);
                    input type="hidden" name="hash" value=(w.hash);
                    button type="submit" { "Approve this definition" }
                }
            }
        }
        table.wide.pins {
            thead { tr { th { "tool" } th { "pinned definition" } th { "by" } } }
            tbody {
                @for (tool, pin) in &pinned {
                    tr {
                        td { code { (visible(tool)) } }
                        td { code.digest title=(pin.hash) { (short(&pin.hash)) } }
                        td { (visible(&pin.by)) }
                    }
                }
            }
        }
    }
}
