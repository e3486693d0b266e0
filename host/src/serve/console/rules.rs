//! The Rules page (admin): the active standing rules with scope, expiry, creator, uses and last
//! use; a form to add one; a button to revoke each. Changes go through the same book the rule
//! gate decides from (as `serve`'s `rules/*` methods do), recorded as made by `web:<user>`.

use std::sync::Arc;

use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::pages::{self, Tab};
use super::{Console, Viewer};
use crate::answer::{Effect, RuleScope, UnknownWord};
use crate::rules::{NewRule, RuleView};

/// The Rules page.
pub async fn page(State(console): State<Arc<Console>>, viewer: Viewer) -> Response {
    if let Err(refused) = viewer.check_admin() {
        return refused.into_response();
    }
    render(&console, &viewer, None, &AddForm::default()).into_response()
}

fn render(console: &Console, viewer: &Viewer, error: Option<&str>, form: &AddForm) -> Markup {
    let rules: Vec<RuleView> = console
        .server
        .service()
        .rules()
        .map(|book| book.list(None))
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.session.as_deref().is_none_or(|s| viewer.sees(s)))
        .collect();
    let service = console.server.service();
    let broken: Vec<String> = service
        .rules()
        .map(|book| book.broken())
        .unwrap_or_default()
        .into_iter()
        .map(|(log, why)| crate::rules::broken_warning(&log, &why))
        .collect();
    let built_in = service.protected().map(|p| p.views()).unwrap_or_default();
    rules_page(
        viewer,
        &Listed {
            rules: &rules,
            built_in: &built_in,
            broken: &broken,
        },
        error,
        form,
    )
}

/// What the Rules page lists.
struct Listed<'a> {
    rules: &'a [RuleView],
    built_in: &'a [RuleView],
    /// Why rules logs are not trusted (no allow rule applies meanwhile).
    broken: &'a [String],
}

/// The add form's fields (kept on the page when the rule is refused).
#[derive(Debug, Default, Deserialize)]
pub struct AddForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    rule: String,
    #[serde(default)]
    effect: String,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    session: String,
    #[serde(default, rename = "for")]
    lasts: String,
    #[serde(default)]
    reason: String,
}

impl AddForm {
    /// The rule the form describes, or what is wrong with it (naming the field).
    fn new_rule(&self, viewer: &Viewer) -> Result<NewRule, String> {
        let effect = match self.effect.as_str() {
            "" => Effect::Allow,
            other => other.parse().map_err(|e: UnknownWord| e.to_string())?,
        };
        let scope = match self.scope.as_str() {
            "" => RuleScope::Project,
            other => other.parse().map_err(|e: UnknownWord| e.to_string())?,
        };
        let session = match scope {
            RuleScope::Session => {
                let s = self.session.trim();
                if s.is_empty() {
                    return Err("session: a session rule needs the session's id".to_owned());
                }
                crate::audit::store::validate_session_id(s).map_err(|e| format!("session: {e}"))?;
                if !viewer.sees(s) {
                    return Err(format!(
                        "session: token {:?} may not see session {s:?}",
                        viewer.name()
                    ));
                }
                Some(s.to_owned())
            }
            _ => None,
        };
        viewer.grant.may_add_rule(scope, session.as_deref())?;
        let lasts = match self.lasts.trim() {
            "" => None,
            d => Some(humantime::parse_duration(d).map_err(|e| format!("for {d:?}: {e}"))?),
        };
        Ok(NewRule {
            rule: self.rule.trim().to_owned(),
            effect,
            scope,
            session,
            lasts,
            creator: format!("web:{}", viewer.name()),
            reason: Some(self.reason.trim().to_owned()).filter(|r| !r.is_empty()),
        })
    }
}

/// Adds the rule the form describes.
pub async fn add(
    State(console): State<Arc<Console>>,
    viewer: Viewer,
    Form(form): Form<AddForm>,
) -> Response {
    if let Err(refused) = viewer.check_admin_form(&form.csrf) {
        return refused.into_response();
    }
    let refused = |error: String| {
        (
            StatusCode::BAD_REQUEST,
            render(&console, &viewer, Some(&error), &form),
        )
            .into_response()
    };
    let new = match form.new_rule(&viewer) {
        Ok(new) => new,
        Err(e) => return refused(e),
    };
    match console.server.service().add_rule(new).await {
        Ok(view) => {
            tracing::info!(
                user = viewer.name(),
                rule = view.rule,
                id = view.id,
                "rule added on the console"
            );
            Redirect::to("/rules").into_response()
        }
        Err(e) => refused(e.to_string()),
    }
}

#[derive(Deserialize)]
pub struct RevokeForm {
    csrf: String,
    id: String,
    #[serde(default)]
    reason: String,
}

/// Revokes a rule.
pub async fn revoke(
    State(console): State<Arc<Console>>,
    viewer: Viewer,
    Form(form): Form<RevokeForm>,
) -> Response {
    if let Err(refused) = viewer.check_admin_form(&form.csrf) {
        return refused.into_response();
    }
    let reason = Some(form.reason.trim().to_owned()).filter(|r| !r.is_empty());
    let service = console.server.service();
    let rule = service
        .rules()
        .and_then(|book| book.list(None).into_iter().find(|r| r.id == form.id));
    let allowed = viewer.grant.may_revoke_rule(&form.id, rule.as_ref());
    if let Err(e) = allowed {
        return (
            StatusCode::FORBIDDEN,
            render(&console, &viewer, Some(&e), &AddForm::default()),
        )
            .into_response();
    }
    match console
        .server
        .service()
        .revoke_rule(&form.id, &format!("web:{}", viewer.name()), reason)
        .await
    {
        Ok(()) => Redirect::to("/rules").into_response(),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            render(&console, &viewer, Some(&e.to_string()), &AddForm::default()),
        )
            .into_response(),
    }
}

fn rules_page(viewer: &Viewer, listed: &Listed<'_>, error: Option<&str>, form: &AddForm) -> Markup {
    let rules = listed.rules;
    pages::page(
        "Rules",
        Some(viewer),
        Tab::Rules,
        html! {
            h1 { "Standing rules (" (rules.len()) ")" }
            @for warning in listed.broken { p.error.broken role="alert" { (warning) } }
            @if let Some(e) = error { p.error role="alert" { (e) } }
            @if rules.is_empty() { p.empty { "No standing rule is active." } }
            @else {
                table.wide.rules {
                    thead { tr {
                        th { "rule" } th { "effect" } th { "scope" } th { "expires" } th { "creator" }
                        th { "uses" } th { "last use" } th {}
                    } }
                    tbody {
                        @for r in rules {
                            tr id=(format!("r-{}", r.id)) {
                                td { code { (r.rule) } @if let Some(why) = &r.reason { br; q { (why) } } }
                                td class=(format!("effect-{}", r.effect.as_str())) { (r.effect.as_str()) }
                                td { (r.scope.as_str()) @if let Some(s) = &r.session { " " a href=(format!("/sessions/{s}")) { (s) } } }
                                td { (r.expires_at.as_deref().unwrap_or("never")) }
                                td { (r.creator) }
                                td.num { (r.uses) }
                                td { (r.last_use.as_deref().unwrap_or("-")) }
                                td {
                                    @if r.creator.starts_with("deployment:") { "in the deployment file" }
                                    @else {
                                        form.revoke method="post" action="/rules/revoke" {
                                            input type="hidden" name="csrf" value=(viewer.csrf);
                                            input type="hidden" name="id" value=(r.id);
                                            button.reject type="submit" { "Revoke" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if !listed.built_in.is_empty() {
                h2 { "Built-in rules" }
                p.hint { "They protect this host's own policy from the agents it answers for, ahead of every rule and plugin, and cannot be revoked." }
                table.wide.rules.built-in {
                    thead { tr { th { "id" } th { "rule" } th { "why" } } }
                    tbody {
                        @for r in listed.built_in {
                            tr id=(format!("r-{}", r.id)) {
                                td { code { (r.id) } }
                                td { code { (r.rule) } }
                                td { (r.reason.as_deref().unwrap_or("")) }
                            }
                        }
                    }
                }
            }
            h2 { "Add a rule" }
            form.add-rule method="post" action="/rules/add" {
                input type="hidden" name="csrf" value=(viewer.csrf);
                label { "rule " input type="text" name="rule" value=(form.rule) placeholder="Bash(npm run test:*)" required maxlength="2048"; }
                label { "effect "
                    select name="effect" {
                        option value="allow" selected[form.effect != "reject"] { "allow" }
                        option value="reject" selected[form.effect == "reject"] { "reject" }
                    }
                }
                label { "scope "
                    select name="scope" {
                        option value="project" selected[form.scope.is_empty() || form.scope == "project"] { "project" }
                        option value="user" selected[form.scope == "user"] { "user" }
                        option value="session" selected[form.scope == "session"] { "session" }
                    }
                }
                label { "session " input type="text" name="session" value=(form.session) placeholder="for a session rule"; }
                label { "for " input type="text" name="for" value=(form.lasts) placeholder="forever, or 8h"; }
                label { "reason " input type="text" name="reason" value=(form.reason) maxlength="1000"; }
                button.allow type="submit" { "Add" }
            }
        },
    )
}
