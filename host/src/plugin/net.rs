//! Outbound HTTP for plugins of API 0.3: `wasi:http/outgoing-handler`, sent by the host, only to
//! the hosts the plugin's deployment entry grants (`allow-hosts`).
//!
//! Every request is checked in the host's send hook (scheme, host and port against the grants;
//! a redirect the plugin follows is a new request, checked the same way), and sent by the host
//! with its own TLS and the system's roots: the plugin has no sockets and looks up no names. A
//! decision makes at most [`MAX_REQUESTS`] requests; a request body is cut at
//! [`MAX_REQUEST_BYTES`] and a response body at [`MAX_RESPONSE_BYTES`]; connecting, the first
//! byte and every later read are bounded by the decision's deadline, since the deadline's
//! interrupt cannot stop a plugin blocked in host I/O. A refused request is an error the plugin
//! sees and a warning in the log naming the plugin and the address.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use super::LogLevel;
use super::grant::Target;
use super::shared::Shared;

pub use super::grant::HostGrant;

/// The most requests one decision makes; the next is refused.
pub const MAX_REQUESTS: usize = 8;

/// The largest request body sent; a longer one fails the request.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// The largest response body read; past it the body ends in an error.
pub const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// The TLS client every plugin request shares: the system's roots, rustls with ring.
fn tls() -> Option<Arc<rustls::ClientConfig>> {
    static CONFIG: std::sync::OnceLock<Option<Arc<rustls::ClientConfig>>> =
        std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots)
            .with_no_client_auth();
            Some(Arc::new(config))
        })
        .clone()
}

/// The per-store side of a plugin's network: its grants and what this decision has used.
pub(crate) struct NetHooks {
    shared: Arc<Shared>,
    requests: usize,
    deadline: Instant,
    /// The question the requests are counted for: instantiating for a decision and the
    /// decision itself count as one.
    question: Option<String>,
}

impl NetHooks {
    pub(crate) fn new(shared: Arc<Shared>) -> NetHooks {
        NetHooks {
            shared,
            requests: 0,
            deadline: Instant::now(),
            question: None,
        }
    }

    /// A run for `question` starts, to end by `deadline`: a new question's requests are counted
    /// afresh.
    pub(crate) fn begin(&mut self, deadline: Instant, question: Option<&str>) {
        self.deadline = deadline;
        if self.question.as_deref() != question {
            self.question = question.map(str::to_owned);
            self.requests = 0;
        }
    }

    fn refuse(&self, target: &str, why: &str) -> HttpError {
        self.shared.log(
            LogLevel::Warn,
            &format!("refused a request to {target}: {why}"),
        );
        HttpError::HttpRequestDenied
    }

    /// The checks a request passes before a byte of it is sent, and its secrets filled in.
    fn admit(&mut self, request: &mut http::Request<WasiBody>) -> Result<Target, HttpError> {
        let uri = request.uri().to_string();
        let target = Target::of(request.uri()).map_err(|why| self.refuse(&uri, &why))?;
        if !self
            .shared
            .spec
            .allow_hosts
            .iter()
            .any(|g| g.admits(&target))
        {
            let why = if self.shared.spec.allow_hosts.is_empty() {
                "the plugin's deployment entry grants no host (allow-hosts)".to_owned()
            } else {
                "not a host the plugin's deployment entry grants (allow-hosts)".to_owned()
            };
            return Err(self.refuse(&target.to_string(), &why));
        }
        if self.question.is_none() {
            // Checking its config or loading, a plugin has no question to reach out for.
            return Err(self.refuse(
                &target.to_string(),
                "a plugin sends requests only while it decides",
            ));
        }
        if self.requests >= MAX_REQUESTS {
            return Err(self.refuse(
                &target.to_string(),
                &format!("a decision makes at most {MAX_REQUESTS} requests"),
            ));
        }
        self.requests += 1;
        // The server is told the host that was checked, as the grant reads it.
        let default_port = if target.https { 443 } else { 80 };
        let host = if target.port == default_port {
            target.host.clone()
        } else {
            format!("{}:{}", target.host, target.port)
        };
        let host = http::HeaderValue::from_str(&host)
            .map_err(|_| self.refuse(&target.to_string(), "the host cannot be a header"))?;
        request.headers_mut().insert(http::header::HOST, host);
        // Only now, for a granted host, does a secret's value go into a header: over TLS, or to
        // this machine by address; never in a request a server echoes back whole.
        let secrets = &self.shared.spec.secrets;
        let clear = !target.https
            && !target
                .connect_host()
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        let echoed = matches!(
            *request.method(),
            http::Method::TRACE | http::Method::CONNECT
        );
        for value in request.headers_mut().values_mut() {
            let Ok(text) = value.to_str() else {
                if value.as_bytes().windows(8).any(|w| w == b"{secret:") {
                    return Err(self.refuse(
                        &target.to_string(),
                        "a header that is not text cannot carry a secret",
                    ));
                }
                continue;
            };
            match super::secret::fill(text, |name| secrets.get(name)) {
                Ok(None) => {}
                Ok(Some(_)) if clear => {
                    return Err(self.refuse(
                        &target.to_string(),
                        "a secret is sent only over https (or to this machine by address)",
                    ));
                }
                Ok(Some(_)) if echoed => {
                    return Err(self.refuse(
                        &target.to_string(),
                        "a secret is never sent in a TRACE or CONNECT request",
                    ));
                }
                Ok(Some(filled)) => {
                    *value = http::HeaderValue::from_str(&filled).map_err(|_| {
                        self.refuse(&target.to_string(), "a secret cannot go in a header")
                    })?;
                    value.set_sensitive(true);
                }
                Err(why) => return Err(self.refuse(&target.to_string(), &why)),
            }
        }
        Ok(target)
    }
}

type SendFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

impl WasiHttpHooks for NetHooks {
    fn set_host_header(&mut self) -> bool {
        // Set by `admit` from the checked host, not from the authority as the plugin wrote it.
        false
    }

    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> SendFuture {
        let admitted = self.admit(&mut request);
        let deadline = self.deadline;
        let shared = self.shared.clone();
        Box::new(async move {
            let target = match admitted {
                Ok(target) => target,
                Err(refused) => {
                    // The body the guest still writes is taken and dropped (within the
                    // decision's time and the body cap), not cut off: some guests' fetch
                    // (StarlingMonkey's) cannot take a body stream that closes under them.
                    let mut body = request.into_body();
                    let mut taken = 0usize;
                    let drain = async {
                        while let Some(Ok(frame)) = body.frame().await {
                            taken += frame.data_ref().map_or(0, |d| d.len());
                            if taken > MAX_REQUEST_BYTES {
                                break;
                            }
                        }
                    };
                    let _ = tokio::time::timeout_at(by(deadline, None), drain).await;
                    return Err(refused);
                }
            };
            let sent = send(&target, request, options, deadline).await;
            if let Err(e) = &sent {
                shared.log(
                    LogLevel::Warn,
                    &format!("a request to {target} failed: {e}"),
                );
            }
            sent
        })
    }
}

/// What is left of the decision's time, capped by what the plugin asked for.
fn left(deadline: Instant, asked: Option<Duration>) -> Duration {
    let left = deadline.saturating_duration_since(Instant::now());
    asked.map_or(left, |a| a.min(left))
}

/// The instant a stage must end by: the decision's deadline, or sooner when the plugin asked.
fn by(deadline: Instant, asked: Option<Duration>) -> tokio::time::Instant {
    tokio::time::Instant::from_std(Instant::now() + left(deadline, asked))
}

/// Whether a granted name may be reached at `address`. A name's DNS is not the operator's own:
/// an address of this machine (loopback, unspecified) or a link-local one (where cloud metadata
/// services answer) is reached only through a grant that names it literally.
fn reachable_by_name(address: &std::net::IpAddr) -> bool {
    let address = match address {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(*address, std::net::IpAddr::V4),
        v4 => *v4,
    };
    match address {
        std::net::IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_unspecified()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast())
        }
        std::net::IpAddr::V6(v6) => {
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unicast_link_local())
        }
    }
}

/// Connects to the target: a literal address as it is, a name at an address the host looked up
/// and found [`reachable_by_name`].
async fn connect(target: &Target) -> Result<tokio::net::TcpStream, HttpError> {
    let host = target.connect_host();
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return tokio::net::TcpStream::connect((ip, target.port))
            .await
            .map_err(HttpError::Connect);
    }
    let addresses: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host, target.port))
        .await
        .map_err(|_| HttpError::DestinationNotFound)?
        .collect();
    let allowed: Vec<std::net::SocketAddr> = addresses
        .iter()
        .copied()
        .filter(|a| reachable_by_name(&a.ip()))
        .collect();
    if allowed.is_empty() {
        return Err(HttpError::DestinationIpProhibited);
    }
    tokio::net::TcpStream::connect(&allowed[..])
        .await
        .map_err(HttpError::Connect)
}

async fn send(
    target: &Target,
    request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    deadline: Instant,
) -> Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
> {
    // Connecting (name, TCP and TLS) and the response's head each end by the decision's
    // deadline at the latest, measured from now: no stage starts a fresh allowance.
    let connected = by(deadline, options.and_then(|o| o.connect_timeout));
    let tcp = tokio::time::timeout_at(connected, connect(target))
        .await
        .map_err(|_| HttpError::ConnectionTimeout)??;
    let _ = tcp.set_nodelay(true);
    // The request goes in origin form; its body is cut at the limit.
    let (mut parts, body) = request.into_parts();
    parts.uri = http::Uri::builder()
        .path_and_query(
            parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned(),
        )
        .build()
        .map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let body = http_body_util::Limited::new(body, MAX_REQUEST_BYTES)
        .map_err(|_| HttpError::HttpRequestBodySize(Some(MAX_REQUEST_BYTES as u64)))
        .boxed_unsync();
    let request = http::Request::from_parts(parts, body);
    let response = if target.https {
        let config = tls().ok_or(HttpError::TlsProtocolError)?;
        let name = rustls::pki_types::ServerName::try_from(target.connect_host().to_owned())
            .map_err(|_| HttpError::TlsCertificateError)?;
        let stream = tokio::time::timeout_at(
            connected,
            tokio_rustls::TlsConnector::from(config).connect(name, tcp),
        )
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(HttpError::Tls)?;
        exchange(stream, request, (deadline, options)).await?
    } else {
        exchange(tcp, request, (deadline, options)).await?
    };
    let between = options.and_then(|o| o.between_bytes_timeout);
    let response = response.map(|body| {
        let limited =
            http_body_util::Limited::new(body, MAX_RESPONSE_BYTES).map_err(|e| match e
                .downcast::<hyper::Error>()
            {
                Ok(e) => HttpError::from(*e),
                Err(_) => HttpError::HttpResponseBodySize(Some(MAX_RESPONSE_BYTES as u64)),
            });
        Deadlined {
            inner: limited.boxed_unsync(),
            deadline,
            between,
            sleep: None,
        }
        .boxed_unsync()
    });
    Ok((
        response,
        Box::new(async { Ok(()) }) as Box<dyn Future<Output = _> + Send>,
    ))
}

/// One request and its response head over `stream`, HTTP/1.1. The connection itself is dropped
/// at the decision's deadline, whatever the plugin still holds of it.
async fn exchange<S>(
    stream: S,
    request: http::Request<WasiBody>,
    (deadline, options): (Instant, Option<RequestOptions>),
) -> Result<http::Response<hyper::body::Incoming>, HttpError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let first_byte = by(deadline, options.and_then(|o| o.first_byte_timeout));
    let (mut sender, connection) = tokio::time::timeout_at(
        first_byte,
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)),
    )
    .await
    .map_err(|_| HttpError::ConnectionTimeout)?
    .map_err(HttpError::from)?;
    let ends = by(deadline, None);
    tokio::spawn(async move {
        // Ends when the response has been read or dropped, or at the deadline.
        let _ = tokio::time::timeout_at(ends, connection).await;
    });
    tokio::time::timeout_at(first_byte, sender.send_request(request))
        .await
        .map_err(|_| HttpError::ConnectionReadTimeout)?
        .map_err(HttpError::from)
}

/// A response body whose every read ends by the decision's deadline (and the plugin's own
/// between-bytes timeout, when shorter).
struct Deadlined {
    inner: WasiBody,
    deadline: Instant,
    between: Option<Duration>,
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl hyper::body::Body for Deadlined {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, HttpError>>> {
        use std::task::Poll;
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.sleep = None;
                Poll::Ready(frame)
            }
            Poll::Pending => {
                let (deadline, between) = (this.deadline, this.between);
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(left(deadline, between))));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.sleep = None;
                        Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_never_leads_to_this_machine_or_a_link_local_address() {
        for refused in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "169.254.169.254",
            "::1",
            "::",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            assert!(!reachable_by_name(&refused.parse().unwrap()), "{refused}");
        }
        // Internal services a team names on purpose stay reachable by their names.
        for reachable in [
            "10.0.0.7",
            "192.168.1.20",
            "172.16.0.1",
            "93.184.216.34",
            "2001:db8::1",
        ] {
            assert!(
                reachable_by_name(&reachable.parse().unwrap()),
                "{reachable}"
            );
        }
    }
}
