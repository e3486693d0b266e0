//! `approval-host serve`: the host as a long-running JSON-RPC 2.0 service for harnesses in any
//! language, over stdio or a Unix socket, with hot reload of the deployment and its plugins.
//!
//! Each connection may open sessions (the connection that opens a session owns it), run turns,
//! record tool calls, ask, switch policy and read the runtime context. A connection that
//! initialised with `answerer: true` is registered as the last answerer for the sessions it owns:
//! the host sends it `approval/prompt` and maps its reply; any reply but the three decisions
//! never grants, and an error reply or a closed connection settles `unavailable`. Nothing a client
//! sends can crash the server: bad input gets a JSON-RPC error and the server keeps serving.
//!
//! This file starts a server from a deployment and reloads it. Where it listens is
//! `transport.rs`; one connection (its lines, its authentication, what it owns) `connection.rs`;
//! the methods `methods.rs` (with `rules.rs` and `hook.rs`); a client as an answerer
//! `answerer.rs`; tokens and roles `auth.rs`; TLS `tls.rs`; the framing `rpc.rs`; file watching
//! `watch.rs`; the web console `console/`; plugins' callbacks (answers that waited)
//! `callbacks.rs`.

mod answerer;
pub mod auth;
pub mod callbacks;
mod connection;
pub mod console;
mod hook;
pub mod http;
pub mod limits;
pub mod mcp_endpoint;
mod methods;
pub mod metrics;
pub mod rebinding;
pub mod rpc;
mod rules;
pub mod tls;
mod transport;
mod warm;
mod watch;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::agent::Agent;
use crate::assemble::{self, AssembleError};
use crate::config::{ConfigError, Deployment};
use crate::plugin::cache::CompiledCache;
use crate::plugin::shadow::{ShadowStatus, Shadows};
use crate::plugin::{LogSink, Mounted, PluginHost, QuarantinePolicy, ReloadReport, TracingSink};
use crate::service::ApprovalService;
use crate::waterfall::{Position, Registration, Scope};

pub use watch::Watcher;

/// The protocol version `initialize` reports.
pub const PROTOCOL_VERSION: &str = "0.1";

/// The notification an answering client gets when the rule it proposed with an answer will not
/// be kept (`{requestId, rule, scope, reason}`); its decision stands for that call.
pub const RULE_DECLINED: &str = "approval/ruleDeclined";

/// Plugin API versions this host serves.
pub const PLUGIN_API_VERSIONS: [&str; 3] = crate::plugin::SERVED_API_VERSIONS;

/// What `serve` needs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The deployment file.
    pub config: PathBuf,
    /// Session logs and the compiled cache live here.
    pub state_dir: PathBuf,
    /// When plugins are quarantined.
    pub quarantine: QuarantinePolicy,
    /// A database URL for the session logs and rules (over the deployment's `[store] url`).
    pub store_url: Option<String>,
    /// Create or migrate the database schema when it is behind.
    pub migrate: bool,
}

/// How long a stop waits for cancelled questions to be settled and audited.
pub const SHUTDOWN_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// A server that could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The deployment file is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A part of the deployment could not be put together (a plugin, the rules, the signing
    /// key, the store), naming the deployment file.
    #[error(transparent)]
    Assemble(#[from] crate::assemble::AssembleError),
    /// Listening or watching failed.
    #[error("{0}")]
    Io(String),
}

struct SessionEntry {
    owner: u64,
    /// How its connection came in: `stdio`, `unix` or `tcp`.
    transport: &'static str,
    /// The name of the token it was opened with (its share of `sessions_per_token`).
    token: String,
    agent: Agent,
}

struct Inner {
    options: ServeOptions,
    service: ApprovalService,
    host: PluginHost,
    mounted: Arc<tokio::sync::Mutex<Mounted>>,
    /// The deployment's shadow plugins (replaced whole at a reload that loads them all).
    shadows: Mutex<Arc<Shadows>>,
    sessions: Mutex<HashMap<String, SessionEntry>>,
    next_conn: AtomicU64,
    /// The JSON-RPC connections open now, for their counts by role, and whether each is local
    /// (served without authentication).
    conns: Mutex<HashMap<u64, (std::sync::Weak<connection::Conn>, bool)>>,
    /// The deployment's `[claude-code]` settings (replaced on reload).
    hook_options: Mutex<crate::claude_code::HookOptions>,
    /// The turns of Claude Code sessions asked through `hook/claude-code`.
    hook_turns: crate::claude_code::HookTurns,
    /// Which token asks about each Claude Code session.
    hook_owners: hook::HookOwners,
    /// The hook sessions held open between calls.
    warm: Arc<warm::WarmSessions>,
    /// The deployment's tokens and the failed attempts per peer.
    gatekeeper: Arc<auth::Gatekeeper>,
    /// The deployment's `[limits]` and the connections open under them.
    admission: Arc<limits::Admission>,
    /// Cancelled when the server stops: every question in flight settles `cancelled`.
    stopping: tokio_util::sync::CancellationToken,
    /// The questions in flight (`approval/request`, `hook/claude-code`), which a stop waits for.
    asking: tokio_util::task::TaskTracker,
    /// The questions waiting on the web console, when the deployment has `[[answerer]] kind =
    /// "web"`; its registration keeps it in the waterfall.
    web: Option<(Arc<console::pending::Pending>, Registration)>,
    /// The deployment's `[telemetry]` (read at start; a reload keeps it).
    telemetry: Option<Arc<crate::telemetry::Telemetry>>,
}

/// A running host.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.inner.options.config)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Loads the deployment (all plugins, or none: the server does not start without one) with
    /// compiled components cached under `<state-dir>/cache`.
    pub async fn start(options: ServeOptions) -> Result<Server, ServeError> {
        Self::start_with_sink(options, Arc::new(TracingSink)).await
    }

    /// [`Server::start`] with plugin log lines going to `sink`.
    pub async fn start_with_sink(
        options: ServeOptions,
        sink: Arc<dyn LogSink>,
    ) -> Result<Server, ServeError> {
        let deployment = Deployment::load(&options.config)?;
        let file = assemble::file_of(&deployment);
        let store = {
            let (deployment, options, file) = (deployment.clone(), options.clone(), file.clone());
            tokio::task::spawn_blocking(move || {
                assemble::open_store(
                    Some(&deployment),
                    options.store_url.as_deref(),
                    &options.state_dir,
                    options.migrate,
                )
                .map_err(|source| AssembleError::Store { file, source })
            })
            .await
            .expect("opening the store does not panic")?
        };
        let service = ApprovalService::with_store(store, deployment.default_policy);
        // A server always keeps standing rules: its clients may add them at any time.
        assemble::prepare(&service, &deployment, &options.state_dir, true)?;
        let telemetry = assemble::telemetry(&service, &deployment)?;
        let hook_options = assemble::hook_options(&deployment, None);
        let gatekeeper = Arc::new(auth::Gatekeeper::new(deployment.tokens.clone()));
        gatekeeper.set_failure_capacity(deployment.limits.failed_login_addresses);
        let held = (
            deployment.limits.held_sessions,
            deployment.limits.held_session_idle,
        );
        let admission = limits::Admission::new(deployment.limits);
        let web = deployment.web_answerer.clone().map(|spec| {
            let pending = Arc::new(console::pending::Pending::default());
            let registration = service.register(
                "web",
                Scope::Global,
                Position::Last,
                console::pending::WebAnswerer {
                    pending: pending.clone(),
                    spec,
                },
            );
            (pending, registration)
        });
        let cache = CompiledCache::new(options.state_dir.join("cache"));
        let host = PluginHost::with_cache(sink, cache)
            .map_err(|source| AssembleError::Plugin { file, source })?;
        let started = Instant::now();
        let (svc, h, quarantine) = (service.clone(), host.clone(), options.quarantine);
        let (mounted, shadows) = tokio::task::spawn_blocking(move || {
            let mounted = assemble::mount(&svc, &h, &deployment, quarantine)?;
            let shadows = assemble::shadows(&svc, &h, &deployment, quarantine)?;
            Ok::<_, AssembleError>((mounted, shadows))
        })
        .await
        .map_err(|e| ServeError::Io(e.to_string()))??;
        tracing::info!(
            plugins = mounted.plugins().len(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "deployment loaded"
        );
        let server = Server {
            inner: Arc::new(Inner {
                options,
                service,
                host,
                mounted: Arc::new(tokio::sync::Mutex::new(mounted)),
                shadows: Mutex::new(shadows),
                sessions: Mutex::new(HashMap::new()),
                next_conn: AtomicU64::new(1),
                conns: Mutex::new(HashMap::new()),
                hook_options: Mutex::new(hook_options),
                hook_turns: crate::claude_code::HookTurns::default(),
                hook_owners: hook::HookOwners::default(),
                warm: Arc::default(),
                gatekeeper,
                admission,
                stopping: tokio_util::sync::CancellationToken::new(),
                asking: tokio_util::task::TaskTracker::new(),
                web,
                telemetry,
            }),
        };
        server.inner.warm.set_bounds(held.0, held.1);
        warm::sweep_while(
            Arc::downgrade(&server.inner.warm),
            server.inner.stopping.clone(),
        );
        Ok(server)
    }

    /// The approval service behind the server.
    pub fn service(&self) -> &ApprovalService {
        &self.inner.service
    }

    /// The JSON-RPC connections open now by the roles of their tokens: `agent`, `answerer`,
    /// `admin` (a connection holding several counts under each), `local` (stdio, or the Unix
    /// socket of a deployment without tokens: every role) and `unauthenticated` (not yet).
    pub fn connections_by_role(&self) -> [(&'static str, usize); 5] {
        use crate::config::token::TokenRole;
        let mut counts = [
            ("agent", 0),
            ("answerer", 0),
            ("admin", 0),
            ("local", 0),
            ("unauthenticated", 0),
        ];
        let conns: Vec<_> = self
            .inner
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(|(conn, local)| Some((conn.upgrade()?, *local)))
            .collect();
        for (conn, local) in conns {
            let grant = conn.lock_grant();
            let at = |counts: &mut [(&str, usize); 5], name: &str| {
                if let Some((_, n)) = counts.iter_mut().find(|(r, _)| *r == name) {
                    *n += 1;
                }
            };
            match grant.as_ref() {
                _ if local => at(&mut counts, "local"),
                None => at(&mut counts, "unauthenticated"),
                Some(g) => {
                    for role in [TokenRole::Agent, TokenRole::Answerer, TokenRole::Admin] {
                        if g.roles.contains(&role) {
                            at(&mut counts, role.as_str());
                        }
                    }
                }
            }
        }
        counts
    }

    /// The sessions open now by how they came: `stdio`, `unix`, `tcp` (a client's
    /// `session/open`), and `other` (a hook's question in flight, or opened in process).
    pub async fn sessions_by_transport(&self) -> [(&'static str, usize); 4] {
        let total = self.inner.service.open_sessions().await.len();
        let mut counts = [("stdio", 0), ("unix", 0), ("tcp", 0), ("other", 0)];
        let mut clients = 0;
        for entry in self.inner.lock_sessions().values() {
            if let Some((_, n)) = counts.iter_mut().find(|(t, _)| *t == entry.transport) {
                *n += 1;
                clients += 1;
            }
        }
        counts[3].1 = total.saturating_sub(clients);
        counts
    }

    /// The deployment's `[telemetry]` exporter, when it has one.
    pub fn telemetry(&self) -> Option<&Arc<crate::telemetry::Telemetry>> {
        self.inner.telemetry.as_ref()
    }

    /// The questions waiting on the web console, when the deployment has one.
    pub fn web_pending(&self) -> Option<&Arc<console::pending::Pending>> {
        self.inner.web.as_ref().map(|(pending, _)| pending)
    }

    /// What the limits have refused since the server started, and the connections open now.
    pub fn admission(&self) -> &limits::Admission {
        &self.inner.admission
    }

    /// Every plugin of the deployment, loaded or not, as `plugins/list` shows them.
    pub async fn plugin_status(&self) -> Vec<crate::plugin::mount::PluginStatus> {
        self.inner.mounted.lock().await.status()
    }

    /// The shadow plugins' figures, as `plugins/list` shows them.
    pub fn shadow_status(&self) -> Vec<ShadowStatus> {
        self.inner.shadows().status()
    }

    /// Waits until every shadow run started so far is recorded.
    pub async fn shadows_settled(&self) {
        self.inner.shadows().idle().await;
    }

    /// Re-reads the deployment file and moves to it (see [`Mounted::apply`]); quarantines end.
    /// An invalid deployment file changes nothing.
    pub async fn reload(&self) -> Result<ReloadReport, ConfigError> {
        let deployment = Deployment::load(&self.inner.options.config)?;
        *self
            .inner
            .hook_options
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = assemble::hook_options(&deployment, None);
        self.inner.gatekeeper.set_tokens(deployment.tokens.clone());
        self.inner
            .gatekeeper
            .set_failure_capacity(deployment.limits.failed_login_addresses);
        self.inner.admission.set_limits(deployment.limits);
        self.inner.warm.set_bounds(
            deployment.limits.held_sessions,
            deployment.limits.held_session_idle,
        );
        self.inner
            .service
            .set_protected(Some(deployment.protected(&self.inner.options.state_dir)));
        if let Some(book) = self.inner.service.rules() {
            assemble::reload_rules(&book, &deployment);
        }
        let mounted = self.inner.mounted.clone();
        let host = self.inner.host.clone();
        let service = self.inner.service.clone();
        let inner = self.inner.clone();
        let report = tokio::task::spawn_blocking(move || {
            let mut mounted = mounted.blocking_lock();
            let mut report = assemble::reload_plugins(&service, &mut mounted, &host, &deployment);
            mounted.release_all();
            // The shadows move together or not at all; the old ones keep watching otherwise.
            match assemble::shadows(&service, &host, &deployment, inner.options.quarantine) {
                Ok(shadows) => *inner.shadows.lock().unwrap_or_else(|p| p.into_inner()) = shadows,
                Err(e) => report.failed.push(("shadows".to_owned(), e.to_string())),
            }
            report
        })
        .await
        .unwrap_or_default();
        tracing::info!(?report, "deployment reloaded");
        Ok(report)
    }

    /// Stops as a disconnect of every client would (Ctrl-C, SIGTERM): every question in flight
    /// settles `cancelled` and is audited, then every open turn of a session a client opened is
    /// ended. Connections stay open; dropping the server afterwards releases its sessions (and
    /// on a database, their leases).
    pub async fn shutdown(&self) {
        self.inner.stopping.cancel();
        self.inner.asking.close();
        // Cancelled questions settle at once; the bound covers an answerer that ignores it.
        if tokio::time::timeout(SHUTDOWN_PATIENCE, self.inner.asking.wait())
            .await
            .is_err()
        {
            tracing::warn!("questions still in flight at shutdown");
        }
        self.inner.warm.clear().await;
        let sessions: Vec<String> = self.inner.lock_sessions().keys().cloned().collect();
        for session in sessions {
            if let Err(e) = self.inner.service.end_turn_if_open(&session).await {
                tracing::warn!(session, error = %e, "could not end the turn at shutdown");
            }
        }
        self.finish_traces().await;
    }

    /// Exports the traces of every question settled so far and stops tracing: what a process
    /// does last, whichever way the server ended (a stop, stdin closed, a listener failing).
    pub async fn finish_traces(&self) {
        if let Some(telemetry) = self.inner.telemetry.clone() {
            let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        }
    }

    /// The files a reload depends on: the deployment file and every plugin's component.
    pub async fn watched_paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.inner.options.config.clone()];
        if let Ok(d) = Deployment::load(&self.inner.options.config) {
            paths.extend(d.plugins.into_iter().map(|p| p.path));
            paths.extend(d.shadows.into_iter().map(|p| p.path));
        }
        paths
    }
}

impl Inner {
    fn shadows(&self) -> Arc<Shadows> {
        self.shadows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn lock_sessions(&self) -> MutexGuard<'_, HashMap<String, SessionEntry>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}
