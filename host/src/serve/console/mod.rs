//! The web console: pending questions answered from a browser, on its own port
//! (`serve --http ADDR`).
//!
//! A person logs in with a `[[token]]` that has the `answerer` (or `admin`) role; the token is
//! exchanged for a server-side login named by an HttpOnly, SameSite=Strict cookie (Secure under
//! TLS) that expires after [`LOGIN_LASTS`]. Every state-changing request carries the login's CSRF
//! token. Every response forbids framing and inline script (`Content-Security-Policy`,
//! `X-Frame-Options: DENY`); every value on a page is escaped. Nothing but the login form and the
//! static assets is served without a login.

pub mod pages;
pub mod pending;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Form, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::config::token::TokenRole;
use crate::outcome::Decision;
use crate::serve::auth::Gatekeeper;
use pending::{Click, Pending};

/// How long a login lasts.
pub const LOGIN_LASTS: Duration = Duration::from_secs(12 * 3600);

/// The login cookie's name.
pub const COOKIE: &str = "approval_console";

/// The page's content security policy: nothing inline, nothing from elsewhere, no framing.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The text of a refused login.
pub const LOGIN_FAILED: &str = "That token is not valid for the console.";

struct Login {
    user: String,
    csrf: String,
    expires: Instant,
}

/// What the console's handlers share.
pub struct Console {
    gatekeeper: Arc<Gatekeeper>,
    pending: Arc<Pending>,
    logins: Mutex<HashMap<String, Login>>,
    /// Served over TLS: the cookie is `Secure`.
    secure: bool,
}

impl Console {
    /// A console answering `pending` for people holding `gatekeeper`'s tokens.
    pub fn new(gatekeeper: Arc<Gatekeeper>, pending: Arc<Pending>, secure: bool) -> Arc<Console> {
        Arc::new(Console {
            gatekeeper,
            pending,
            logins: Mutex::default(),
            secure,
        })
    }

    /// The console's routes.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/", get(show_pending))
            .route("/login", get(login_form).post(log_in))
            .route("/logout", post(log_out))
            .route("/answer", post(answer))
            .route("/events", get(events))
            .route("/console.js", get(script))
            .route("/console.css", get(style))
            .layer(axum::middleware::map_response(secure_headers))
            .with_state(self.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Login>> {
        self.logins.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The login a request's cookie names, if it is live: `(user, csrf)`.
    fn login(&self, headers: &HeaderMap) -> Option<(String, String)> {
        let id = cookie(headers)?;
        let mut logins = self.lock();
        let now = Instant::now();
        logins.retain(|_, l| l.expires > now);
        logins.get(&id).map(|l| (l.user.clone(), l.csrf.clone()))
    }

    /// Serves the console on `listener` until the task is dropped, over TLS when `tls` is given.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> std::io::Result<()> {
        let router = self.router();
        loop {
            let (stream, peer) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            let service = hyper_util::service::TowerToHyperService::new(router.clone());
            let tls = tls.clone();
            tokio::spawn(async move {
                let served = match tls {
                    None => {
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .with_upgrades()
                            .await
                    }
                    Some(acceptor) => {
                        let accepted = tokio::time::timeout(
                            super::tls::HANDSHAKE_TIMEOUT,
                            acceptor.accept(stream),
                        )
                        .await;
                        let Ok(Ok(stream)) = accepted else {
                            tracing::warn!(%peer, "console: TLS handshake failed");
                            return;
                        };
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .with_upgrades()
                            .await
                    }
                };
                if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "console connection ended");
                }
            });
        }
    }
}

fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
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
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
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

async fn log_in(State(console): State<Arc<Console>>, Form(form): Form<LoginForm>) -> Response {
    let grant = console.gatekeeper.check("web console", Some(&form.token));
    let Ok(grant) = grant.map_err(|e| tracing::warn!(reason = e, "console login refused")) else {
        return (StatusCode::UNAUTHORIZED, pages::login(Some(LOGIN_FAILED))).into_response();
    };
    if !grant.has(TokenRole::Answerer) {
        return (StatusCode::FORBIDDEN, pages::login(Some(LOGIN_FAILED))).into_response();
    }
    let id = random_hex();
    console.lock().insert(
        id.clone(),
        Login {
            user: grant.name.clone(),
            csrf: random_hex(),
            expires: Instant::now() + LOGIN_LASTS,
        },
    );
    tracing::info!(user = grant.name, "console login");
    let cookie = format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        LOGIN_LASTS.as_secs(),
        if console.secure { "; Secure" } else { "" }
    );
    let mut response = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: String,
}

async fn log_out(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    match (console.login(&headers), cookie(&headers)) {
        (Some((_, csrf)), Some(id)) if csrf == form.csrf => {
            console.lock().remove(&id);
            let mut response = Redirect::to("/login").into_response();
            response.headers_mut().insert(
                header::SET_COOKIE,
                HeaderValue::from_static(
                    "approval_console=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0",
                ),
            );
            response
        }
        (Some(_), _) => StatusCode::FORBIDDEN.into_response(),
        (None, _) => Redirect::to("/login").into_response(),
    }
}

async fn show_pending(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    match console.login(&headers) {
        Some((user, csrf)) => {
            pages::pending(&user, &csrf, &console.pending.list(), Instant::now()).into_response()
        }
        None => Redirect::to("/login").into_response(),
    }
}

#[derive(Deserialize)]
struct AnswerForm {
    csrf: String,
    id: String,
    decision: String,
    #[serde(default)]
    reason: String,
}

async fn answer(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Form(form): Form<AnswerForm>,
) -> Response {
    let Some((user, csrf)) = console.login(&headers) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    if form.csrf != csrf {
        return StatusCode::FORBIDDEN.into_response();
    }
    let decision = match form.decision.as_str() {
        "allow-once" => Decision::AllowOnce,
        "reject" => Decision::Reject,
        _ => return StatusCode::BAD_REQUEST.into_response(),
    };
    let reason = (!form.reason.trim().is_empty() && decision == Decision::Reject)
        .then(|| form.reason.trim().to_owned());
    let answered = console.pending.answer(
        &form.id,
        Click {
            decision,
            reason,
            user,
        },
    );
    if answered {
        Redirect::to("/").into_response()
    } else {
        // Answered elsewhere, cancelled or timed out meanwhile.
        (StatusCode::CONFLICT, Redirect::to("/")).into_response()
    }
}

async fn events(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if console.login(&headers).is_none() {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let mut changes = console.pending.subscribe();
    let stream = async_stream(move |tx| async move {
        while changes.changed().await.is_ok() {
            // Browsers drop an event whose data is empty: send the change count.
            let n = *changes.borrow_and_update();
            if tx
                .send(Ok::<_, Infallible>(
                    Event::default().event("changed").data(n.to_string()),
                ))
                .await
                .is_err()
            {
                break;
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A stream fed by a task through a small channel (ends when the task does or the client goes).
fn async_stream<T, F, Fut>(producer: F) -> impl futures_util::Stream<Item = T> + Send + 'static
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(producer(tx));
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
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
