//! Where `serve` listens: stdio, a Unix socket (0600 from the start), TCP with TLS, and the web
//! console's HTTP.

use std::path::Path;

use tokio::sync::oneshot;

use super::{ServeError, Server, console, tls};

/// Binds a Unix socket at `path` that only the owner may connect to, and that nobody else can
/// reach even for an instant: it is bound inside a fresh `0700` directory beside `path`, made
/// `0600` there, then renamed into place. (Binding at `path` and changing its mode after would
/// leave a window in which the socket has the umask's mode.)
fn bind_private(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let private = tempfile::Builder::new()
        .prefix(".approval-host-socket-")
        .permissions(std::fs::Permissions::from_mode(crate::private::DIR_MODE))
        .tempdir_in(parent)?;
    let inside = private.path().join("socket");
    let listener = tokio::net::UnixListener::bind(&inside)?;
    std::fs::set_permissions(
        &inside,
        std::fs::Permissions::from_mode(crate::private::FILE_MODE),
    )?;
    std::fs::rename(&inside, path)?;
    Ok(listener)
}

/// A private Unix socket at `path` ([`bind_private`]), replacing a stale one a stopped server
/// left; refused when a live server listens there.
pub(super) async fn listen_private(path: &Path) -> Result<tokio::net::UnixListener, ServeError> {
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(ServeError::Io(format!(
                "{}: another server is listening there",
                path.display()
            )));
        }
        std::fs::remove_file(path)
            .map_err(|e| ServeError::Io(format!("{}: {e}", path.display())))?;
    }
    bind_private(path).map_err(|e| ServeError::Io(format!("{}: {e}", path.display())))
}

/// Tells a connection refused at the door why, if its socket takes the line at once (it is
/// never waited on), and closes it.
fn refuse(text: &str, try_write: impl FnOnce(&[u8]) -> std::io::Result<usize>) {
    let mut line = super::rpc::response(
        &serde_json::Value::Null,
        Err(super::rpc::RpcError::new(super::limits::LIMITED, text)),
    );
    line.push('\n');
    let _ = try_write(line.as_bytes());
}

impl Server {
    /// Serves one client on stdin/stdout until stdin closes.
    pub async fn serve_stdio(&self) {
        self.connection(tokio::io::stdin(), tokio::io::stdout())
            .await;
    }

    /// Serves many clients on a Unix socket at `path` until the task is dropped.
    pub async fn serve_unix(&self, path: &Path) -> Result<(), ServeError> {
        let listener = listen_private(path).await?;
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    super::limits::accept_failed(&e).await;
                    continue;
                }
            };
            let slot = match self
                .inner
                .admission
                .admit(super::limits::Transport::Unix, None)
            {
                Ok(slot) => slot,
                Err(text) => {
                    refuse(&text, |line| stream.try_write(line));
                    continue;
                }
            };
            let server = self.clone();
            tokio::spawn(async move {
                let (read, write) = stream.into_split();
                let authenticate = server.inner.gatekeeper.has_tokens();
                server
                    .connection_as(
                        read,
                        write,
                        "unix socket".to_owned(),
                        authenticate,
                        Some(slot),
                    )
                    .await;
            });
        }
    }

    /// Serves the web console on `listener` (over TLS when `tls` is given) until the task is
    /// dropped. The deployment must have `[[answerer]] kind = "web"` (what the console answers)
    /// and tokens (who may log in).
    pub async fn serve_console(
        &self,
        listener: tokio::net::TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Result<(), ServeError> {
        let file = self.inner.options.config.display().to_string();
        let Some((pending, _)) = &self.inner.web else {
            return Err(ServeError::Io(format!(
                "{file}: the web console needs [[answerer]] kind = \"web\" in the deployment"
            )));
        };
        if !self.inner.gatekeeper.has_tokens() {
            return Err(ServeError::Io(format!(
                "{file}: the web console needs [[token]] entries with the answerer role: people log in with them"
            )));
        }
        let console = console::Console::new(self.clone(), pending.clone(), tls.is_some());
        console
            .serve(listener, tls)
            .await
            .map_err(|e| ServeError::Io(format!("web console: {e}")))
    }

    /// Serves many clients over TCP at `addr`, over TLS unless `tls` is `None` (plain TCP, which
    /// the command line allows only with `--insecure-plaintext`). Every connection authenticates
    /// with a token: the deployment must declare some. Returns the bound address through `bound`
    /// (port 0 picks a free one).
    pub async fn serve_tcp(
        &self,
        addr: &str,
        tls: Option<tokio_rustls::TlsAcceptor>,
        bound: Option<oneshot::Sender<std::net::SocketAddr>>,
    ) -> Result<(), ServeError> {
        if !self.inner.gatekeeper.has_tokens() {
            return Err(ServeError::Io(format!(
                "{}: serving over the network needs [[token]] entries: every connection must authenticate (approval-host token new --role agent --config FILE)",
                self.inner.options.config.display()
            )));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| ServeError::Io(format!("{addr}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| ServeError::Io(format!("{addr}: {e}")))?;
        tracing::info!(%local, tls = tls.is_some(), "listening");
        if let Some(bound) = bound {
            let _ = bound.send(local);
        }
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    super::limits::accept_failed(&e).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let slot = match self
                .inner
                .admission
                .admit(super::limits::Transport::Tcp, Some(peer.ip()))
            {
                Ok(slot) => slot,
                Err(text) => {
                    // Over TLS the refusal is the closed connection: a handshake for a client
                    // already over its share would be work an attacker chooses.
                    if tls.is_none() {
                        refuse(&text, |line| stream.try_write(line));
                    }
                    tracing::warn!(%peer, "connection refused: {text}");
                    continue;
                }
            };
            let server = self.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                // Failures are counted per address, not per port: a client reconnects from a new
                // port each time.
                let peer_name = format!("tcp {}", peer.ip());
                match tls {
                    None => {
                        let (read, write) = stream.into_split();
                        server
                            .connection_as(read, write, peer_name, true, Some(slot))
                            .await;
                    }
                    Some(acceptor) => {
                        if let Some(stream) = tls::accept(&acceptor, stream, &peer).await {
                            let (read, write) = tokio::io::split(stream);
                            server
                                .connection_as(read, write, peer_name, true, Some(slot))
                                .await;
                        }
                    }
                }
            });
        }
    }
}
