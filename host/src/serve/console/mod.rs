//! The web console, on its own port (`serve --http ADDR`): the questions waiting for a person
//! ([`questions`]), the sessions' records ([`sessions`]), the standing rules ([`rules`]) and the
//! plugins ([`plugins`]).
//!
//! A person logs in with a `[[token]]` that has the `answerer` role (`admin` also sees and
//! changes rules and plugins); the token is exchanged for a server-side login named by an
//! HttpOnly, SameSite=Strict cookie (Secure under TLS) that expires after [`LOGIN_LASTS`]. A
//! token limited to some sessions sees and answers only those. Every state-changing request
//! carries the login's CSRF token. Every response forbids framing and inline script
//! (`Content-Security-Policy`, `X-Frame-Options: DENY`); every value on a page is escaped
//! (maud). Nothing but the login form and the static assets is served without a login.

pub mod limits;
pub mod pages;
pub mod pending;
pub mod pins;
pub mod plugins;
pub mod questions;
pub mod rules;
pub mod sessions;
pub mod visible;

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Extension, Form, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::Server;
use super::auth::Grant;
use super::http::Peer;
use crate::config::token::TokenRole;
use pending::Pending;

/// How long a login lasts.
pub const LOGIN_LASTS: Duration = Duration::from_secs(12 * 3600);

/// The login cookie's name.
pub const COOKIE: &str = "approval_console";

/// The page's content security policy: nothing inline, nothing from elsewhere, no framing.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The text of a refused login.
pub const LOGIN_FAILED: &str = "That token is not valid for the console.";

/// The device cookie: set at a successful login, so that failed attempts from the same address
/// by anyone without it (a neighbour behind the same NAT, an attacker) are counted apart and
/// cannot lock this browser out.
pub const DEVICE_COOKIE: &str = "approval_console_device";

/// How long a device cookie is remembered by the browser.
pub const DEVICE_LASTS: Duration = Duration::from_secs(30 * 24 * 3600);

/// The most devices remembered at once (the oldest is forgotten first).
pub const DEVICES_KEPT: usize = 4096;

/// The text of a login refused because of too many failed attempts, with when to retry.
pub fn rate_limited(retry: Duration) -> String {
    format!(
        "Too many failed logins from this address: try again in {} s.",
        retry.as_secs().max(1)
    )
}

/// The text of a page that needs the admin role.
pub const NEEDS_ADMIN: &str = "Rules and plugins need a token with the admin role.";

/// The text of a form whose CSRF token is wrong (a forged or stale form).
pub const BAD_FORM: &str = "This form is stale or was not sent from the console: reload the page.";

/// What a reload did, or why the deployment was not reloaded.
type ReloadResult = Result<crate::plugin::ReloadReport, String>;

struct Login {
    grant: Grant,
    csrf: String,
    expires: Instant,
    /// Cancelled at logout: the login's event streams end.
    ended: CancellationToken,
    /// The login's event streams open now.
    streams: Arc<AtomicUsize>,
}

/// What the console's handlers share.
pub struct Console {
    server: Server,
    pending: Arc<Pending>,
    logins: Mutex<HashMap<String, Login>>,
    /// Served over TLS: the cookie is `Secure`.
    secure: bool,
    /// The device cookies handed out at successful logins, oldest first.
    devices: Mutex<std::collections::VecDeque<String>>,
    /// What each login's last reload did, until its Plugins page has shown it (by CSRF token,
    /// which names one login).
    reloaded: Mutex<HashMap<String, ReloadResult>>,
    sessions: sessions::Summaries,
}

/// The person behind a request: a live login. As an extractor it refuses a request without one
/// (a page redirects to the login form; anything else is `401`).
pub struct Viewer {
    /// What their token grants.
    pub grant: Grant,
    /// The login's CSRF token, which every form carries.
    pub csrf: String,
    /// Cancelled when the login ends (logout); its token's revocation is `grant.revoked`.
    pub ended: CancellationToken,
    /// The login's event streams open now.
    pub streams: Arc<AtomicUsize>,
}

impl Viewer {
    /// Their name, as answers and rules record it (`web:<name>`).
    pub fn name(&self) -> &str {
        &self.grant.name
    }

    /// Whether they hold the admin role.
    pub fn is_admin(&self) -> bool {
        self.grant.roles.contains(&TokenRole::Admin)
    }

    /// Which standing rules their answers may make ([`Grant::authority`]).
    pub fn authority(&self) -> crate::answer::Authority {
        self.grant.authority()
    }

    /// Whether they may see `session`.
    pub fn sees(&self, session: &str) -> bool {
        self.grant.may_open(session)
    }

    /// Refuses a form whose CSRF token is not the login's.
    pub fn check_form(&self, csrf: &str) -> Result<(), Refused> {
        if csrf == self.csrf {
            Ok(())
        } else {
            Err(Refused(BAD_FORM))
        }
    }

    /// Refuses a forged form, or one from a viewer without the admin role.
    pub fn check_admin_form(&self, csrf: &str) -> Result<(), Refused> {
        self.check_form(csrf)?;
        self.check_admin()
    }

    /// Refuses a viewer without the admin role.
    pub fn check_admin(&self) -> Result<(), Refused> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(Refused(NEEDS_ADMIN))
        }
    }
}

/// A request the viewer may not make: `403` with why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused(pub &'static str);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        (StatusCode::FORBIDDEN, self.0).into_response()
    }
}

impl FromRequestParts<Arc<Console>> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &Arc<Console>,
    ) -> Result<Self, Self::Rejection> {
        console.viewer(&parts.headers).ok_or_else(|| {
            if parts.method == Method::GET && parts.uri.path() != "/events" {
                Redirect::to("/login").into_response()
            } else {
                StatusCode::UNAUTHORIZED.into_response()
            }
        })
    }
}

impl Console {
    /// A console for `server`'s people, answering `pending`.
    pub fn new(server: Server, pending: Arc<Pending>, secure: bool) -> Arc<Console> {
        Arc::new(Console {
            server,
            pending,
            logins: Mutex::default(),
            secure,
            devices: Mutex::default(),
            reloaded: Mutex::default(),
            sessions: sessions::Summaries::default(),
        })
    }

    /// The console's routes.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/", get(questions::page))
            .route("/answer", post(questions::answer))
            .route("/events", get(questions::events))
            .route("/sessions", get(sessions::list))
            .route("/sessions/{id}", get(sessions::timeline))
            .route("/rules", get(rules::page))
            .route("/rules/add", post(rules::add))
            .route("/rules/revoke", post(rules::revoke))
            .route("/plugins", get(plugins::page))
            .route("/plugins/reload", post(plugins::reload))
            .route("/pins", get(pins::page))
            .route("/pins/approve", post(pins::approve))
            .route("/login", get(login_form).post(log_in))
            .route("/logout", post(log_out))
            .route("/console.js", get(script))
            .route("/console.css", get(style))
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                limits::whole_body,
            ))
            .layer(axum::middleware::map_response(secure_headers))
            .with_state(self.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Login>> {
        self.logins.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps what a reload did for the login's next Plugins page.
    fn keep_reloaded(&self, viewer: &Viewer, report: ReloadResult) {
        let mut reloaded = self.reloaded.lock().unwrap_or_else(|p| p.into_inner());
        // Only live logins' reports are kept.
        let live: std::collections::HashSet<String> =
            self.lock().values().map(|l| l.csrf.clone()).collect();
        reloaded.retain(|csrf, _| live.contains(csrf));
        reloaded.insert(viewer.csrf.clone(), report);
    }

    /// What the login's last reload did, once.
    fn take_reloaded(&self, viewer: &Viewer) -> Option<ReloadResult> {
        self.reloaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&viewer.csrf)
    }

    /// The live login a request's cookie names.
    fn viewer(&self, headers: &HeaderMap) -> Option<Viewer> {
        let id = cookie(headers)?;
        let mut logins = self.lock();
        let now = Instant::now();
        // A revoked token's logins end with it.
        logins.retain(|_, l| l.expires > now && !l.grant.revoked.is_cancelled());
        logins.get(&id).map(|l| Viewer {
            grant: l.grant.clone(),
            csrf: l.csrf.clone(),
            ended: l.ended.clone(),
            streams: l.streams.clone(),
        })
    }

    /// Serves the console on `listener` until the task is dropped, over TLS when `tls` is given.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> std::io::Result<()> {
        let router = self.router();
        let admission = self.server.inner.admission.clone();
        super::http::serve(
            super::limits::Transport::Console,
            listener,
            tls,
            router,
            admission,
        )
        .await;
        Ok(())
    }
}

fn cookie(headers: &HeaderMap) -> Option<String> {
    cookie_named(headers, COOKIE)
}

fn cookie_named(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    // The operating system's generator; without it nobody can log in (no predictable ids).
    getrandom::fill(&mut bytes).expect("the operating system's random generator");
    crate::audit::chain::hex_of(&bytes)
}

async fn secure_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Not `no-referrer`: under it a browser sends `Origin: null` with the page's own form posts,
    // which the loopback guard must refuse as it refuses a sandboxed frame's.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn login_form() -> maud::Markup {
    pages::login(None)
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn log_in(
    State(console): State<Arc<Console>>,
    Extension(Peer(peer)): Extension<Peer>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    // Failed attempts count per address, and apart for a browser that logged in before.
    let device = cookie_named(&headers, DEVICE_COOKIE).filter(|d| {
        console
            .devices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(d)
    });
    let counted_as = match &device {
        Some(d) => format!("web console {} device {d}", peer.ip()),
        None => format!("web console {}", peer.ip()),
    };
    let gatekeeper = &console.server.inner.gatekeeper;
    let grant = match gatekeeper.check(&counted_as, Some(&form.token)) {
        Ok(grant) => grant,
        Err(e) => {
            tracing::warn!(%peer, reason = e, "console login refused");
            return match gatekeeper.retry_after(&counted_as) {
                Some(retry) if e == super::auth::TOO_MANY_FAILURES => (
                    StatusCode::TOO_MANY_REQUESTS,
                    pages::login(Some(&rate_limited(retry))),
                )
                    .into_response(),
                _ => (StatusCode::UNAUTHORIZED, pages::login(Some(LOGIN_FAILED))).into_response(),
            };
        }
    };
    if !grant.has(TokenRole::Answerer) {
        return (StatusCode::FORBIDDEN, pages::login(Some(LOGIN_FAILED))).into_response();
    }
    let id = random_hex();
    tracing::info!(user = grant.name, %peer, "console login");
    console.lock().insert(
        id.clone(),
        Login {
            grant,
            csrf: random_hex(),
            expires: Instant::now() + LOGIN_LASTS,
            ended: CancellationToken::new(),
            streams: Arc::default(),
        },
    );
    let cookie = format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        LOGIN_LASTS.as_secs(),
        if console.secure { "; Secure" } else { "" }
    );
    let mut response = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    if device.is_none() {
        let device = random_hex();
        {
            let mut devices = console.devices.lock().unwrap_or_else(|p| p.into_inner());
            if devices.len() >= DEVICES_KEPT {
                devices.pop_front();
            }
            devices.push_back(device.clone());
        }
        let cookie = format!(
            "{DEVICE_COOKIE}={device}; HttpOnly; SameSite=Strict; Path=/login; Max-Age={}{}",
            DEVICE_LASTS.as_secs(),
            if console.secure { "; Secure" } else { "" }
        );
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    response
}

/// A form that carries only the CSRF token.
#[derive(Deserialize)]
pub struct CsrfForm {
    /// The login's CSRF token.
    pub csrf: String,
}

async fn log_out(
    State(console): State<Arc<Console>>,
    viewer: Viewer,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Err(refused) = viewer.check_form(&form.csrf) {
        return refused.into_response();
    }
    if let Some(id) = cookie(&headers)
        && let Some(login) = console.lock().remove(&id)
    {
        login.ended.cancel();
    }
    let mut response = Redirect::to("/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("approval_console=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    );
    response
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        pages::SCRIPT,
    )
}

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        pages::STYLE,
    )
}
