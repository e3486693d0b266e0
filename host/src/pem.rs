//! Certificates from PEM files: `serve`'s TLS listener and the database's `[store] ca-file`
//! read them the same way, refusing a file that holds none.

use std::path::{Path, PathBuf};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// A PEM file that could not be read or holds no certificate, naming it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct PemError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub reason: String,
}

/// The certificates of the PEM file at `path`.
///
/// # Errors
/// The file cannot be read, does not parse, or holds no `CERTIFICATE`.
pub fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let err = |reason: String| PemError {
        path: path.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no CERTIFICATE in the file".to_owned()));
    }
    Ok(certs)
}
