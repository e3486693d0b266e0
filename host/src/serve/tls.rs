//! TLS for `serve --listen`: the server's certificate and key from PEM files, and optionally the
//! certificate authorities whose client certificates it requires.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// How long a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Completes the TLS handshake of a connection from `peer`, within [`HANDSHAKE_TIMEOUT`]; a
/// failed or slow handshake is logged and gives `None`.
pub async fn accept(
    acceptor: &TlsAcceptor,
    stream: tokio::net::TcpStream,
    peer: &std::net::SocketAddr,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            tracing::warn!(%peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::warn!(%peer, "TLS handshake timed out");
            None
        }
    }
}

/// The files of a TLS listener.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server's certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Require client certificates issued by these authorities (PEM).
    pub client_ca: Option<PathBuf>,
}

/// Why a TLS listener could not be set up; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// rustls refused the certificate and key (a key that does not match, say).
    #[error("TLS set-up: {0}")]
    Config(String),
}

fn file_err(path: &Path, reason: impl ToString) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

/// The certificates of a PEM file, refusing a file that holds none ([`crate::pem::certs`]).
pub fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    crate::pem::certs(path).map_err(|e| TlsError::File {
        path: e.path,
        reason: e.reason,
    })
}

/// Builds the acceptor, refusing files that do not load.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| file_err(&files.key, e))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certs(path)? {
                roots.add(cert).map_err(|e| file_err(path, e))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| file_err(path, e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        TlsError::Config(format!(
            "{} and {}: {e}",
            files.cert.display(),
            files.key.display()
        ))
    })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
