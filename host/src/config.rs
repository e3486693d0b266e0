//! The deployment file (TOML): the default approval policy today, plugins later.
//!
//! Loading is strict: an unknown key or a value outside a vocabulary is an error that names the
//! file and the field, never a silently ignored setting.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::policy::{POLICY_VOCABULARY_ERROR, Policy};

/// A deployment file that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML for a deployment (an unknown key, a wrong type...).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said, with the line and the key.
        message: String,
    },
    /// `[approval] policy` is outside the vocabulary.
    #[error("{path}: [approval] policy = {value:?}: {POLICY_VOCABULARY_ERROR}")]
    Policy {
        /// The file.
        path: PathBuf,
        /// The refused value.
        value: String,
    },
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDeployment {
    #[serde(default)]
    approval: RawApproval,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawApproval {
    policy: Option<String>,
}

/// A loaded deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    /// The file it came from; `None` for the embedded default.
    pub path: Option<PathBuf>,
    /// The policy of sessions without their own switch (`ask` when omitted).
    pub default_policy: Policy,
}

impl Deployment {
    /// The embedded default: policy `ask` and no answerer, so every request settles
    /// `unavailable` (fail-closed without configuration).
    pub fn embedded() -> Self {
        Deployment {
            path: None,
            default_policy: Policy::Ask,
        }
    }

    /// Loads a deployment file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Parses deployment text; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let raw: RawDeployment = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let default_policy = match raw.approval.policy {
            None => Policy::Ask,
            Some(value) => value.parse().map_err(|_| ConfigError::Policy {
                path: path.to_owned(),
                value,
            })?,
        };
        Ok(Deployment {
            path: Some(path.to_owned()),
            default_policy,
        })
    }
}
