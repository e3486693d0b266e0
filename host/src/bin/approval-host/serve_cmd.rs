//! `approval-host serve`: the host as a process, over stdio, a Unix socket, TCP with TLS, and the
//! web console; the TLS flags' rules; SIGTERM and Ctrl-C end it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result};
use approval_host::plugin::QuarantinePolicy;
use approval_host::serve::{ServeError, ServeOptions, Server};

use crate::{Context, UsageError};

/// The arguments of `serve`.
#[derive(clap::Args, Debug)]
pub(crate) struct ServeArgs {
    /// The deployment file (TOML).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: PathBuf,
    /// Listen on this Unix socket instead of stdio.
    #[arg(long, value_name = "PATH")]
    pub(crate) socket: Option<PathBuf>,
    /// Do not watch the deployment and plugin files (reload only on `plugins/reload`).
    #[arg(long)]
    pub(crate) no_watch: bool,
    /// Quarantine a plugin after more than this many failures within the window.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub(crate) quarantine_failures: usize,
    /// The window failures are counted in, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub(crate) quarantine_window: u64,
    /// How long a quarantine lasts, in seconds (a reload ends it sooner).
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub(crate) quarantine_backoff: u64,
    /// Create or migrate the database schema first when it is behind (see `db migrate`).
    #[arg(long)]
    pub(crate) migrate: bool,
    /// Also listen on TCP at this address (`host:port`), over TLS (--tls-cert and
    /// --tls-key) unless --insecure-plaintext. Every connection authenticates with a token
    /// (`[[token]]` in the deployment; see `token new`).
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<String>,
    /// Also serve the web console at this address (`host:port`): pending questions answered
    /// from a browser. Needs `[[answerer]] kind = "web"` and tokens with the answerer role in
    /// the deployment; TLS as for --listen.
    #[arg(long, value_name = "ADDR")]
    pub(crate) http: Option<String>,
    /// Serve Prometheus metrics (`/metrics`), `/healthz` and `/readyz` at this address: on
    /// loopback (`127.0.0.1:9464`) over plain HTTP without a token; anywhere else over TLS (as
    /// for --listen) with a bearer token of the `metrics` role for `/metrics` and `/readyz`.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics: Option<String>,
    /// Receive plugins' callbacks at this address (`POST /plugins/<name>/callback`): the
    /// answers of plugins that wait (`wait_ms`), such as a person's button in a chat. Only
    /// callbacks are served there. On loopback over plain HTTP; anywhere else over TLS as for
    /// --listen. Without it, a plugin that waits settles as its `on-timeout` says, at once.
    #[arg(long, value_name = "ADDR")]
    pub(crate) callbacks: Option<String>,
    /// The server's certificate chain (PEM) for --listen and --http.
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The server's private key (PEM) for --listen and --http.
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Require client certificates issued by these authorities (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_client_ca: Option<PathBuf>,
    /// Listen without TLS: tokens and questions cross the network in the clear. Only for a
    /// network you trust; a warning is logged at start.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key"])]
    pub(crate) insecure_plaintext: bool,
}

/// Runs `serve`.
pub(crate) fn run(ctx: &Context, args: ServeArgs) -> Result<ExitCode> {
    let state_dir = &ctx.dir;
    let ServeArgs {
        config,
        socket,
        quarantine_failures,
        quarantine_window,
        quarantine_backoff,
        migrate,
        listen,
        http,
        metrics,
        callbacks,
        tls_cert,
        tls_key,
        tls_client_ca,
        insecure_plaintext,
        no_watch,
    } = args;
    let metrics = metrics
        .map(|addr| socket_address("--metrics", &addr))
        .transpose()?;
    let metrics_off_loopback = metrics.is_some_and(|a| !a.ip().is_loopback());
    let callbacks = callbacks
        .map(|addr| socket_address("--callbacks", &addr))
        .transpose()?;
    let callbacks_off_loopback = callbacks.is_some_and(|a| !a.ip().is_loopback());
    let flag = if listen.is_some() {
        "--listen"
    } else if http.is_some() {
        "--http"
    } else if metrics_off_loopback {
        "--metrics"
    } else {
        "--callbacks"
    };
    let tls = match (
        listen.is_some() || http.is_some() || metrics_off_loopback || callbacks_off_loopback,
        tls_cert,
        tls_key,
        insecure_plaintext,
    ) {
        (false, None, None, false) => None,
        (false, ..) => {
            return Err(UsageError(
                "--tls-cert, --tls-key and --insecure-plaintext go with --listen, --http, or --metrics or --callbacks off loopback"
                    .to_owned(),
            )
            .into());
        }
        (true, Some(cert), Some(key), false) => {
            let files = approval_host::serve::tls::TlsFiles {
                cert,
                key,
                client_ca: tls_client_ca,
            };
            Some(
                approval_host::serve::tls::acceptor(&files)
                    .map_err(|e| UsageError(format!("{flag}: {e}")))?,
            )
        }
        (true, None, None, true) => None,
        (true, ..) => {
            return Err(UsageError(format!(
                "{flag} needs --tls-cert and --tls-key (or, on a network you trust, --insecure-plaintext)"
            ))
            .into());
        }
    };
    let metrics = metrics.map(|addr| {
        if addr.ip().is_loopback() {
            (addr, None, false)
        } else {
            (addr, tls.clone(), true)
        }
    });
    let callbacks = callbacks.map(|addr| {
        let tls = if addr.ip().is_loopback() {
            None
        } else {
            tls.clone()
        };
        (addr, tls)
    });
    let network = listen.map(|addr| (addr, tls.clone()));
    let console = http.map(|addr| (addr, tls));
    let options = ServeOptions {
        config,
        state_dir: state_dir.clone(),
        store_url: ctx.store.clone(),
        migrate,
        quarantine: QuarantinePolicy {
            max_failures: quarantine_failures,
            window: Duration::from_secs(quarantine_window),
            backoff: Duration::from_secs(quarantine_backoff),
        },
    };
    let runtime = crate::wiring::server_runtime()?;
    let listeners = Listeners {
        socket,
        network,
        console,
        metrics,
        callbacks,
    };
    let served = runtime.block_on(serve(options, listeners, !no_watch));
    // The server and its sessions are gone by now (leases released); stdin's reader
    // thread may still block on a client that keeps its end open: do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(500));
    served?;
    Ok(ExitCode::SUCCESS)
}

/// Where the server listens, each with its TLS when it has one.
struct Listeners {
    socket: Option<PathBuf>,
    network: Option<(String, Option<tokio_rustls::TlsAcceptor>)>,
    console: Option<(String, Option<tokio_rustls::TlsAcceptor>)>,
    /// The address, its TLS, and whether scrapes authenticate.
    metrics: Option<(
        std::net::SocketAddr,
        Option<tokio_rustls::TlsAcceptor>,
        bool,
    )>,
    callbacks: Option<(std::net::SocketAddr, Option<tokio_rustls::TlsAcceptor>)>,
}

async fn serve(options: ServeOptions, listeners: Listeners, watch: bool) -> Result<()> {
    let Listeners {
        socket,
        network,
        console,
        metrics,
        callbacks,
    } = listeners;
    let server = Server::start(options).await.map_err(|e| match e {
        ServeError::Config(e) => anyhow::Error::new(e),
        other => anyhow::Error::new(UsageError(other.to_string())),
    })?;
    if let Some((_, _, authenticate)) = &metrics {
        server.check_metrics(*authenticate)?;
    }
    let _watcher = if watch {
        Some(server.watch(Duration::from_millis(200)).await?)
    } else {
        None
    };
    let web = async {
        match &console {
            Some((addr, tls)) => {
                if tls.is_none() {
                    tracing::warn!(
                        addr,
                        "web console WITHOUT TLS (--insecure-plaintext): tokens and cookies cross the network in the clear"
                    );
                }
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| approval_host::serve::ServeError::Io(format!("{addr}: {e}")))?;
                tracing::info!(addr, "web console listening");
                server.serve_console(listener, tls.clone()).await
            }
            None => std::future::pending().await,
        }
    };
    let scraped = async {
        match metrics {
            Some((addr, tls, authenticate)) => {
                if authenticate && tls.is_none() {
                    tracing::warn!(
                        %addr,
                        "metrics WITHOUT TLS (--insecure-plaintext): tokens cross the network in the clear"
                    );
                }
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| approval_host::serve::ServeError::Io(format!("{addr}: {e}")))?;
                tracing::info!(%addr, authenticate, "metrics, /healthz and /readyz listening");
                server.serve_metrics_with(listener, tls, authenticate).await
            }
            None => std::future::pending().await,
        }
    };
    let callbacks = match callbacks {
        Some((addr, tls)) => {
            let listener = server
                .bind_callbacks(addr)
                .await
                .with_context(|| format!("--callbacks {addr}"))?;
            crate::wiring::announce_callbacks(&listener, tls.is_some())?;
            Some((listener, tls))
        }
        None => None,
    };
    let called = async {
        match callbacks {
            Some((listener, tls)) => server.serve_callbacks(listener, tls).await,
            None => std::future::pending().await,
        }
    };
    let stdio = async {
        if network.is_none() && socket.is_none() && console.is_none() {
            server.serve_stdio().await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let tcp = async {
        match &network {
            Some((addr, tls)) => {
                if tls.is_none() {
                    tracing::warn!(
                        addr,
                        "listening WITHOUT TLS (--insecure-plaintext): tokens and questions cross the network in the clear"
                    );
                }
                server.serve_tcp(addr, tls.clone(), None).await
            }
            None => std::future::pending().await,
        }
    };
    let unix = async {
        match &socket {
            Some(path) => server.serve_unix(path).await,
            None => std::future::pending().await,
        }
    };
    // SIGTERM (a service manager's stop) ends the server as Ctrl-C does, as if every client
    // disconnected: questions in flight settle `cancelled`, open turns end, sessions close, and
    // on a database their leases are released at once rather than left to expire.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    // The stop runs while the listeners and connections are still up (they are dropped only
    // once it is done): a connection torn down first would settle its questions `unavailable`.
    let stop = async {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        server.shutdown().await;
    };
    let ended: Result<()> = tokio::select! {
        () = stdio => Ok(()),
        served = tcp => served.map_err(Into::into),
        served = unix => served.map_err(Into::into),
        served = web => served.map_err(Into::into),
        served = scraped => served.map_err(Into::into),
        served = called => served.map_err(Into::into),
        () = stop => Ok(()),
    };
    server.finish_traces().await;
    if let Some(path) = &socket {
        let _ = std::fs::remove_file(path);
    }
    ended
}

/// `--metrics ADDR`, `--callbacks ADDR`: an IP address and a port.
fn socket_address(flag: &str, addr: &str) -> Result<std::net::SocketAddr> {
    Ok(addr
        .parse()
        .map_err(|e| UsageError(format!("{flag} {addr:?}: {e} (say 127.0.0.1:9464)")))?)
}
