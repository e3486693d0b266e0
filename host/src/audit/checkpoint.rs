//! Signed checkpoints: what makes truncating a log, or replacing it whole, detectable.
//!
//! A hash chain alone proves a log is self-consistent, not that it is the log the host wrote:
//! whoever can write the file can cut it short, or write a new consistent chain. So at every
//! `turn/end`, and every [`EVERY_RECORDS`] records or [`EVERY`] while a turn is open, the host signs
//! `{session, seq, head, time}` (the chain value of the line at `seq`) with an Ed25519 key kept
//! outside the state directory, and appends the checkpoint, synced, to a checkpoint log of its own,
//! `<state-dir>/checkpoints/<session>.jsonl`, and to the same name in a second directory when the
//! deployment names one (`[audit] checkpoint-copy`). Anyone holding the public key can then tell a
//! log that still holds every checkpointed line from one that was shortened, rewritten or
//! extended; the copy keeps that true for whoever can also remove the state directory's own
//! checkpoint logs. Rules logs are checkpointed after every rule added or revoked.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::audit::chain::{self, Head};

/// Records between checkpoints while a turn is open. Each checkpoint is a signature and a sync of
/// its own, so this bounds what they cost a busy session (about 2% at 64 askers on one log).
pub const EVERY_RECORDS: u64 = 10_000;

/// Time between checkpoints while a turn is open (checked as requests complete).
pub const EVERY: Duration = Duration::from_secs(10);

/// What a checkpoint signs, before its fields (checkpoints written before they were chained).
const DOMAIN: &str = "approval-host checkpoint v1";

/// What a chained checkpoint signs, before its fields.
const DOMAIN_CHAINED: &str = "approval-host checkpoint v2";

/// What the first checkpoint of a session's checkpoint log commits to, before its session.
const CHECKPOINTS_GENESIS: &str = "approval-host checkpoints";

/// A key file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The key file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The file does not hold a key.
    #[error("{path}: {why}")]
    Invalid {
        /// The key file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

fn parse_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let text = text.trim();
    if text.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in text.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

fn read_key_text(path: &Path) -> Result<String, KeyError> {
    std::fs::read_to_string(path).map_err(|source| KeyError::Io {
        path: path.to_owned(),
        source,
    })
}

/// The public key file written beside a signing key: `<key>.pub`.
pub fn public_key_path(key: &Path) -> PathBuf {
    let mut name = key.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// Creates a new signing key at `path` (mode 0600, refusing to overwrite one) and its public key
/// at `<path>.pub`; returns the public key file. A missing parent directory is made, readable by
/// its owner only (the usual place, `~/.config/approval-host/`, often does not exist yet).
pub fn keygen(path: &Path) -> Result<PathBuf, KeyError> {
    let io_err = |source| KeyError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let mut dirs = std::fs::DirBuilder::new();
        dirs.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut dirs, 0o700);
        dirs.create(parent).map_err(io_err)?;
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| io_err(io::Error::other(e.to_string())))?;
    let key = SigningKey::from_bytes(&seed);
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(io_err)?;
    writeln!(file, "{}", chain::hex_of(&seed))
        .and_then(|()| file.sync_all())
        .map_err(io_err)?;
    let public = public_key_path(path);
    std::fs::write(
        &public,
        format!("{}\n", chain::hex_of(key.verifying_key().as_bytes())),
    )
    .map_err(|source| KeyError::Io {
        path: public.clone(),
        source,
    })?;
    Ok(public)
}

/// Reads a signing key written by [`keygen`].
pub fn load_signing_key(path: &Path) -> Result<SigningKey, KeyError> {
    let seed = parse_hex::<32>(&read_key_text(path)?).ok_or_else(|| KeyError::Invalid {
        path: path.to_owned(),
        why: "not an Ed25519 signing key (64 hex digits, as `approval-host keygen` writes)".into(),
    })?;
    Ok(SigningKey::from_bytes(&seed))
}

/// Reads a public key written by [`keygen`].
pub fn load_public_key(path: &Path) -> Result<VerifyingKey, KeyError> {
    let invalid = |why: &str| KeyError::Invalid {
        path: path.to_owned(),
        why: why.to_owned(),
    };
    let bytes = parse_hex::<32>(&read_key_text(path)?)
        .ok_or_else(|| invalid("not an Ed25519 public key (64 hex digits)"))?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| invalid("not a valid Ed25519 public key"))
}

/// One signed checkpoint, a line of the checkpoint log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// The session.
    pub session: String,
    /// The seq of the line checkpointed.
    pub seq: u64,
    /// The chain value of that line (hex).
    pub head: String,
    /// When it was signed, RFC 3339.
    pub time: String,
    /// Its place in the session's checkpoint log (1 for the first); absent in checkpoints
    /// written before the checkpoint log was chained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    /// The [`Checkpoint::link`] of the checkpoint before it ([`first_link`] for the first):
    /// removing, reordering or inserting a checkpoint breaks the chain. Absent as `n` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<String>,
    /// The Ed25519 signature (hex) over the fields above.
    pub sig: String,
}

/// What the first checkpoint of `session`'s checkpoint log commits to as its `prev`.
pub fn first_link(session: &str) -> String {
    chain::hex_of(&sha2::Sha256::digest(
        format!("{CHECKPOINTS_GENESIS}\n{session}").as_bytes(),
    ))
}

impl Checkpoint {
    fn message(&self) -> Vec<u8> {
        let Checkpoint {
            session,
            seq,
            head,
            time,
            ..
        } = self;
        match (self.n, &self.prev) {
            (Some(n), Some(prev)) => {
                format!("{DOMAIN_CHAINED}\n{session}\n{seq}\n{head}\n{time}\n{n}\n{prev}")
            }
            _ => format!("{DOMAIN}\n{session}\n{seq}\n{head}\n{time}"),
        }
        .into_bytes()
    }

    /// Signs the line at `seq` of `session`, whose chain value is `head`, as the `n`th
    /// checkpoint of the session's checkpoint log, after the one whose link is `prev`.
    pub fn sign(
        key: &SigningKey,
        session: &str,
        seq: u64,
        head: &Head,
        (n, prev): (u64, String),
    ) -> Checkpoint {
        let mut checkpoint = Checkpoint {
            session: session.to_owned(),
            seq,
            head: chain::hex(head),
            time: humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
            n: Some(n),
            prev: Some(prev),
            sig: String::new(),
        };
        checkpoint.sig = chain::hex_of(&key.sign(&checkpoint.message()).to_bytes());
        checkpoint
    }

    /// Whether `key` signed exactly these fields.
    pub fn verify(&self, key: &VerifyingKey) -> bool {
        let Some(sig) = parse_hex::<64>(&self.sig) else {
            return false;
        };
        key.verify(&self.message(), &Signature::from_bytes(&sig))
            .is_ok()
    }

    /// What the next checkpoint commits to: the SHA-256 (hex) of this one's line.
    pub fn link(&self) -> String {
        // The writer's serialisation of these fields, so the same for the line it wrote.
        let line = serde_json::to_vec(self).unwrap_or_default();
        chain::hex_of(&sha2::Sha256::digest(&line))
    }

    /// Where the checkpoint after this one goes: its `n` and `prev`.
    pub fn next_place(&self, index: usize) -> (u64, String) {
        (self.n.unwrap_or(index as u64 + 1) + 1, self.link())
    }
}

/// `<state-dir>/checkpoints/<session>.jsonl`.
pub fn checkpoints_path(state_dir: &Path, session: &str) -> PathBuf {
    checkpoints_in(&state_dir.join("checkpoints"), session)
}

/// `<dir>/<session>.jsonl`: a session's checkpoint log in a checkpoint directory (the state
/// directory's `checkpoints/`, or a copy).
pub fn checkpoints_in(dir: &Path, session: &str) -> PathBuf {
    dir.join(format!("{session}.jsonl"))
}

/// Reads a checkpoint log: each line parsed, or why it does not parse (a line that is not
/// UTF-8 is one such line, named, never an error of the whole read). A missing file is empty.
pub fn read_checkpoints(path: &Path) -> io::Result<Vec<Result<Checkpoint, String>>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(bytes
        .split(|b| *b == b'\n')
        .enumerate()
        .filter(|(_, line)| !line.trim_ascii().is_empty())
        .map(|(i, line)| match std::str::from_utf8(line) {
            Ok(text) => serde_json::from_str::<Checkpoint>(text).map_err(|e| e.to_string()),
            Err(_) => Err(format!("line {} is not UTF-8", i + 1)),
        })
        .collect())
}

/// Signs and appends checkpoints for a service.
pub struct Checkpointer {
    key: SigningKey,
    state_dir: PathBuf,
    copy: Option<PathBuf>,
    /// Where each session's next checkpoint goes (`n`, `prev`), once known; held while one is
    /// written, so checkpoints are appended one at a time.
    places: Mutex<std::collections::HashMap<String, (u64, String)>>,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer")
            .field("state_dir", &self.state_dir)
            .field("copy", &self.copy)
            .finish_non_exhaustive()
    }
}

impl Checkpointer {
    /// Checkpoints signed with `key`, kept under `state_dir/checkpoints`.
    pub fn new(key: SigningKey, state_dir: impl Into<PathBuf>) -> Self {
        Checkpointer {
            key,
            state_dir: state_dir.into(),
            copy: None,
            places: Mutex::default(),
        }
    }

    /// The public half of the signing key, to check checkpoints with.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The checkpoints written for `session` under the state directory.
    ///
    /// # Errors
    /// The checkpoint log exists but cannot be read.
    pub fn checkpoints(&self, session: &str) -> io::Result<Vec<Result<Checkpoint, String>>> {
        read_checkpoints(&checkpoints_path(&self.state_dir, session))
    }

    /// Also appends every checkpoint to `<dir>/<session>.jsonl`.
    pub fn with_copy(mut self, dir: impl Into<PathBuf>) -> Self {
        self.copy = Some(dir.into());
        self
    }

    /// Signs the line at `seq` of `session` (chain value `head`) and appends the checkpoint to
    /// the session's checkpoint log, and to its copy, returning once both are durable. The copy
    /// is written even when the first write fails (the first error is returned).
    pub fn write(&self, session: &str, seq: u64, head: &Head) -> io::Result<()> {
        let mut places = self.places.lock().unwrap_or_else(|p| p.into_inner());
        let place = match places.get(session) {
            Some(place) => place.clone(),
            // The first this run: after the last checkpoint the log holds.
            None => {
                let written = self.checkpoints(session)?;
                let last = written
                    .iter()
                    .enumerate()
                    .rev()
                    .find_map(|(i, c)| c.as_ref().ok().map(|c| c.next_place(i)));
                last.unwrap_or_else(|| (1, first_link(session)))
            }
        };
        let checkpoint = Checkpoint::sign(&self.key, session, seq, head, place);
        let mut line = serde_json::to_vec(&checkpoint).map_err(io::Error::other)?;
        line.push(b'\n');
        let main = append_synced(&checkpoints_path(&self.state_dir, session), &line);
        if main.is_ok() {
            places.insert(session.to_owned(), checkpoint.next_place(0));
        }
        let copy = match &self.copy {
            Some(dir) => append_synced(&checkpoints_in(dir, session), &line),
            None => Ok(()),
        };
        main.and(copy)
    }
}

/// Appends `line` to `path` (creating it and its directory) and syncs it. A file created here
/// has its directory entry synced too, so the checkpoint log itself survives a crash.
fn append_synced(path: &Path, line: &[u8]) -> io::Result<()> {
    let with_path = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::private::create_dir_all(dir).map_err(with_path)?;
    let created = !path.exists();
    let mut file = crate::private::open_options()
        .create(true)
        .append(true)
        .open(path)
        .map_err(with_path)?;
    file.write_all(line)
        .and_then(|()| file.sync_data())
        .map_err(with_path)?;
    if created {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(with_path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chained_and_older_unchained_checkpoints_both_verify_and_their_place_is_signed() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let head = chain::genesis("s1");
        let chained = Checkpoint::sign(&key, "s1", 3, &head, (1, first_link("s1")));
        assert!(chained.verify(&key.verifying_key()));
        // Its place is part of what was signed.
        let moved = Checkpoint {
            n: Some(2),
            ..chained.clone()
        };
        assert!(!moved.verify(&key.verifying_key()));
        // A checkpoint written before the chain (no n, no prev) still verifies as it was signed.
        let mut older = Checkpoint {
            n: None,
            prev: None,
            sig: String::new(),
            ..chained.clone()
        };
        older.sig = chain::hex_of(&key.sign(&older.message()).to_bytes());
        assert!(older.verify(&key.verifying_key()));
        let line = serde_json::to_string(&older).unwrap();
        assert!(
            !line.contains("\"n\"") && !line.contains("\"prev\""),
            "{line}"
        );
        assert_eq!(chained.next_place(0), (2, chained.link()));
        assert_eq!(older.next_place(4).0, 6);
    }
}
