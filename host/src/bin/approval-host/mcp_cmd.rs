//! `approval-host mcp`: the MCP gateway between an agent and one MCP server (`--name`, and a
//! command after `--` or `--upstream URL`) or the deployment's `[[mcp.server]]`s behind one
//! endpoint, over stdio or streamable HTTP (`--listen`). The
//! deployment is served as `serve` serves it (rules, plugins, hot reload, the web console with
//! `--console`); the gateway itself is [`approval_host::mcp`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result};
use approval_host::Deployment;
use approval_host::mcp::{Gateway, GatewayOptions, ServerEntry, Upstream};
use approval_host::plugin::QuarantinePolicy;
use approval_host::serve::{ServeError, ServeOptions, Server};
use tokio_util::sync::CancellationToken;

use crate::{Context, UsageError};

/// The arguments of `mcp`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct McpArgs {
    /// What to do besides running the gateway.
    #[command(subcommand)]
    command_: Option<McpCommand>,
    /// The deployment file (TOML): its rules, plugins and answerers decide every `tools/call`.
    #[arg(long, value_name = "FILE", required = true)]
    config: Option<PathBuf>,
    /// The server's name in rules: its tools are asked about as `mcp__<NAME>__<tool>`. Without
    /// it (and without a server), the gateway serves the deployment's `[[mcp.server]]`s behind
    /// one endpoint, each tool as `<server>__<tool>`.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Serve agents over streamable HTTP instead of stdio, at this address (`127.0.0.1:8931`,
    /// endpoint `/mcp`: every request bears a `[[token]]` with the agent role; off loopback over
    /// TLS) or on a Unix socket only its owner may use (`unix:/run/approval.sock`, endpoint `/mcp`;
    /// a token needed when the deployment declares any). The server is --upstream, a command
    /// after `--` (started for each client), or the deployment's `[[mcp.server]]`s.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// The MCP server's streamable HTTP endpoint (`http://127.0.0.1:8000/mcp`).
    #[arg(long, value_name = "URL", requires = "listen")]
    upstream: Option<String>,
    /// Ask a stdio agent's questions in this session (a fresh `mcp-<uuid>` when omitted).
    #[arg(long, value_name = "ID", conflicts_with = "listen")]
    session: Option<String>,
    /// Also serve the web console at this address (`host:port`), as `serve --http` does:
    /// pending questions answered from a browser (needs `[[answerer]] kind = "web"`).
    #[arg(long, value_name = "ADDR")]
    console: Option<String>,
    /// Receive plugins' callbacks at this address, as `serve --callbacks` does: the answers of
    /// plugins that wait (`wait_ms`). Off loopback over TLS (or --insecure-plaintext).
    #[arg(long, value_name = "ADDR")]
    callbacks: Option<String>,
    /// The certificate chain (PEM) the console and a TCP --listen serve TLS with.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve the console, or a --listen address off loopback, without TLS: only for a network
    /// you trust.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key"])]
    insecure_plaintext: bool,
    /// Do not watch the deployment and plugin files.
    #[arg(long)]
    no_watch: bool,
    /// The MCP server's command and its arguments (stdio), after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// `mcp`'s subcommands.
#[derive(clap::Subcommand, Debug)]
enum McpCommand {
    /// The pinned tool definitions: list them, approve a changed one.
    #[command(subcommand)]
    Pins(crate::mcp_pins_cmd::PinsCommand),
}

/// Runs `mcp`.
pub(crate) fn run(ctx: &Context, args: McpArgs) -> Result<ExitCode> {
    if let Some(McpCommand::Pins(command)) = args.command_ {
        return crate::mcp_pins_cmd::run(ctx, command);
    }
    let Some(config_file) = args.config.clone() else {
        return Err(UsageError("mcp needs --config FILE".to_owned()).into());
    };
    // reqwest (the SDK's HTTP client) is built on rustls without a provider of its own.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let own = own_server(&args)?;
    let listen = args.listen.as_deref().map(listen_at).transpose()?;
    let deployment = Deployment::load(&config_file)?;
    let servers = match own {
        Some(one) => Servers::One(one),
        None if deployment.mcp.servers.is_empty() => {
            return Err(UsageError(format!(
                "{}: it lists no [[mcp.server]]; give one server as --name NAME -- COMMAND (or --listen ADDR --name NAME --upstream URL)",
                config_file.display()
            ))
            .into());
        }
        None => Servers::Many(deployment.mcp.servers.clone()),
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            approval_host::serve::tls::acceptor(&approval_host::serve::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: None,
            })
            .map_err(|e| UsageError(format!("--tls-cert/--tls-key: {e}")))?,
        ),
        _ => None,
    };
    let callbacks = args
        .callbacks
        .as_deref()
        .map(|addr| {
            addr.parse::<std::net::SocketAddr>()
                .map_err(|e| UsageError(format!("--callbacks {addr:?}: {e} (say 127.0.0.1:8443)")))
        })
        .transpose()?;
    if let Some(addr) = callbacks
        && !addr.ip().is_loopback()
        && tls.is_none()
        && !args.insecure_plaintext
    {
        return Err(UsageError(format!(
            "--callbacks {addr}: off loopback callbacks need --tls-cert and --tls-key (or, on a network you trust, --insecure-plaintext)"
        ))
        .into());
    }
    if args.console.is_some() && tls.is_none() && !args.insecure_plaintext {
        return Err(UsageError(
            "--console needs --tls-cert and --tls-key (or, on a network you trust, --insecure-plaintext)"
                .to_owned(),
        )
        .into());
    }
    if let Some(Listen::Tcp(addr)) = &listen
        && !addr.ip().is_loopback()
        && tls.is_none()
        && !args.insecure_plaintext
    {
        return Err(UsageError(format!(
            "--listen {addr}: off loopback the MCP endpoint needs --tls-cert and --tls-key (or, on a network you trust, --insecure-plaintext)"
        ))
        .into());
    }
    let mut config = deployment.mcp.clone();
    if let Some(Listen::Tcp(addr)) = &listen
        && !addr.ip().is_loopback()
        && !addr.ip().is_unspecified()
    {
        // Requests to the address it listens on name it as their Host.
        config.allowed_hosts.push(addr.ip().to_string());
    }
    let options = GatewayOptions {
        server: match &servers {
            Servers::One(one) => one.name.clone(),
            Servers::Many(_) => String::new(),
        },
        config,
        // Relative path rules and the protections read a question's paths from the gateway's
        // directory: where a server it starts runs, and the nearest thing to the agent's own
        // for a server reached over HTTP (a question without one would pass relative rules).
        cwd: std::env::current_dir()
            .ok()
            .map(|d| d.display().to_string()),
        session: args.session.clone(),
        calls_in_flight: deployment.limits.requests_in_flight,
        sessions: deployment.limits.connections,
        sessions_per_caller: deployment.limits.sessions_per_token,
    };
    let serve = ServeOptions {
        config: config_file.clone(),
        state_dir: ctx.dir.clone(),
        store_url: ctx.store.clone(),
        migrate: false,
        quarantine: QuarantinePolicy::default(),
    };
    // Over stdio the gateway has one agent to answer: one thread serves it best.
    let one_client = listen.is_none();
    let doors = Doors {
        listen,
        tls,
        console: args.console,
        callbacks,
    };
    let served = gateway(serve, options, servers, doors, !args.no_watch);
    let served = if one_client {
        // Its one thread has nothing else to do while a decision syncs: it syncs it itself.
        approval_host::audit::log::commit_in_place();
        crate::wiring::run_one_client(served)?
    } else {
        let runtime = crate::wiring::server_runtime()?;
        let served = runtime.block_on(served);
        runtime.shutdown_timeout(Duration::from_millis(500));
        served
    };
    served?;
    Ok(ExitCode::SUCCESS)
}

/// The servers behind the gateway.
enum Servers {
    /// The one given on the command line: the agent sees its own names.
    One(ServerEntry),
    /// The deployment's `[[mcp.server]]`s, each tool as `<server>__<tool>`.
    Many(Vec<ServerEntry>),
}

/// The server given on the command line (`--name` with a command after `--` or `--upstream`),
/// or `None` when there is none and the deployment's are served.
fn own_server(args: &McpArgs) -> Result<Option<ServerEntry>> {
    let usage = |text: &str| anyhow::Error::new(UsageError(text.to_owned()));
    let upstream = match (&args.upstream, args.command.is_empty()) {
        (Some(url), true) => Some(Upstream::url(url).map_err(|e| UsageError(e.to_string()))?),
        (None, false) => {
            Some(Upstream::command(args.command.clone()).map_err(|e| UsageError(e.to_string()))?)
        }
        (Some(_), false) => {
            return Err(usage(
                "give the MCP server either as --upstream URL or as a command after `--`, not both",
            ));
        }
        (None, true) => None,
    };
    match (&args.name, upstream) {
        (Some(name), Some(upstream)) => {
            approval_host::mcp::check_server_name(name).map_err(|e| UsageError(e.to_string()))?;
            Ok(Some(ServerEntry {
                name: name.clone(),
                upstream,
            }))
        }
        (Some(_), None) => Err(usage(
            "no MCP server: give its command after `--` (stdio), or --listen ADDR --upstream URL; or leave out --name to serve the deployment's [[mcp.server]]s",
        )),
        (None, Some(_)) => Err(usage(
            "mcp needs --name NAME for its server: its tools are asked about as mcp__<NAME>__<tool>",
        )),
        (None, None) => Ok(None),
    }
}

/// Where `--listen` serves the endpoint.
enum Listen {
    /// A TCP address.
    Tcp(std::net::SocketAddr),
    /// A Unix socket's path.
    Unix(PathBuf),
}

/// The line `mcp --listen` prints once it listens.
fn listening_line(scheme: &str, addr: std::net::SocketAddr) -> String {
    format!("listening on {scheme}://{addr}/mcp")
}

/// `--listen ADDR` or `--listen unix:PATH`.
fn listen_at(addr: &str) -> Result<Listen> {
    if let Some(path) = addr.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(UsageError("--listen unix:PATH needs a path".to_owned()).into());
        }
        return Ok(Listen::Unix(PathBuf::from(path)));
    }
    let parsed: std::net::SocketAddr = addr.parse().map_err(|e| {
        UsageError(format!(
            "--listen {addr:?}: {e} (say 127.0.0.1:8931, or unix:/path/to/socket)"
        ))
    })?;
    Ok(Listen::Tcp(parsed))
}

/// Where the gateway listens besides stdio, and its TLS.
struct Doors {
    listen: Option<Listen>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    console: Option<String>,
    callbacks: Option<std::net::SocketAddr>,
}

async fn gateway(
    serve: ServeOptions,
    options: GatewayOptions,
    servers: Servers,
    doors: Doors,
    watch: bool,
) -> Result<()> {
    let Doors {
        listen,
        tls,
        console,
        callbacks,
    } = doors;
    let server = Server::start(serve).await.map_err(|e| match e {
        ServeError::Config(e) => anyhow::Error::new(e),
        other => anyhow::Error::new(UsageError(other.to_string())),
    })?;
    let _watcher = if watch {
        Some(server.watch(Duration::from_millis(200)).await?)
    } else {
        None
    };
    let callbacks = match callbacks {
        Some(addr) => {
            let listener = server
                .bind_callbacks(addr)
                .await
                .with_context(|| format!("--callbacks {addr}"))?;
            let tls = if addr.ip().is_loopback() {
                None
            } else {
                tls.clone()
            };
            crate::wiring::announce_callbacks(&listener, tls.is_some())?;
            Some((listener, tls))
        }
        None => None,
    };
    let called = async {
        match callbacks {
            Some((listener, tls)) => server
                .serve_callbacks(listener, tls)
                .await
                .map_err(anyhow::Error::new),
            None => std::future::pending().await,
        }
    };
    let service = server.service().clone();
    let gateway = match servers {
        Servers::One(one) => Gateway::new(service, options, one.upstream),
        Servers::Many(many) => Gateway::many(service, options, many),
    }
    .map_err(|e| UsageError(e.to_string()))?;
    let cancel = CancellationToken::new();
    let agents = async {
        match listen {
            None => gateway.serve_stdio().await.map_err(anyhow::Error::new),
            Some(Listen::Tcp(addr)) => {
                server
                    .check_mcp_endpoint()
                    .map_err(|e| UsageError(e.to_string()))?;
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("--listen {addr}"))?;
                let addr = listener.local_addr().context("--listen")?;
                // stdout carries nothing else in this mode: a harness (or a test) that asked
                // for port 0 reads the address here.
                let scheme = if tls.is_some() { "https" } else { "http" };
                println!("{}", listening_line(scheme, addr));
                let endpoint =
                    axum::Router::new().nest_service("/mcp", gateway.router(cancel.clone()));
                server
                    .serve_mcp(listener, tls.clone(), endpoint)
                    .await
                    .map_err(anyhow::Error::new)
            }
            Some(Listen::Unix(path)) => {
                let endpoint =
                    axum::Router::new().nest_service("/mcp", gateway.router(cancel.clone()));
                let listener = approval_host::serve::mcp_endpoint::bind_private_socket(&path)
                    .await
                    .map_err(|e| UsageError(format!("--listen unix:{}: {e}", path.display())))?;
                println!("listening on unix:{}", path.display());
                server
                    .serve_mcp_unix(listener, &path, endpoint, cancel.clone())
                    .await
                    .map_err(anyhow::Error::new)
            }
        }
    };
    let web = async {
        match &console {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("--console {addr}"))?;
                // stderr, since stdout may be the agent's: a harness (or a test) that asked for
                // port 0 reads the address here.
                eprintln!(
                    "console listening on http://{}",
                    listener.local_addr().context("--console")?
                );
                server
                    .serve_console(listener, tls.clone())
                    .await
                    .map_err(anyhow::Error::new)
            }
            None => std::future::pending().await,
        }
    };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    let ended = tokio::select! {
        served = agents => served,
        served = web => served,
        served = called => served,
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = terminate.recv() => Ok(()),
    };
    cancel.cancel();
    // Every connection's turn ends (waiting questions settle cancelled) before the server stops.
    let _ = tokio::time::timeout(Duration::from_secs(5), gateway.shutdown()).await;
    server.shutdown().await;
    server.finish_traces().await;
    ended
}
