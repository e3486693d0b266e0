//! A session's fold kept beside its log, so that opening a long session reads only the records
//! appended since, not all of them: a hook answering in process opens its session on every tool
//! call, and reading a log of thousands of records cost more than the rest of the call.
//!
//! The directory store writes `<session>.fold` as a log closes, once the log has grown by
//! [`KEEP_AFTER`] records past the fold it was opened from. The file holds where the log stood
//! (its records, its length, the length and chain value of its last line) and the fold at that
//! point, sealed with a keyed MAC. An open starts from it only when all of these hold:
//!
//! - the MAC checks under this host's key, for this session, this format and this version of the
//!   host;
//! - the log is at least as long as the mark says, and the line that ends there hashes to the
//!   chain value the mark holds (that line names its `seq`, and through its `prev` commits to the
//!   line before it, and so on back to the session's genesis).
//!
//! Anything else (no key, a missing, forged, foreign or stale file, a log rewritten, shortened or
//! torn) reads the log in full as before. A kept fold never makes an open fail, and a failure to
//! write one changes nothing but the next open's speed.
//!
//! Why a MAC and not a plain file: the fold carries what widens a decision (the session's policy
//! switch, its sandbox mode, its rules), so an unsealed file beside the log would let whoever can
//! write the state directory change them without a trace in the log, which `verify` checks and
//! this file is not part of. The key is derived from the host's local key, kept outside the state
//! directory (see `assemble`).

use std::sync::{Arc, OnceLock};

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::audit::chain::{self, Head};
use crate::audit::fold::SessionFold;

/// How many records a log grows past its kept fold before closing it keeps a new one: an open
/// then reads at most about this many records more than were appended since, and a session's fold
/// is written once every this many records rather than at every close.
pub const KEEP_AFTER: u64 = 64;

/// The kept fold's file name after the session id, beside its `.jsonl`.
pub const SUFFIX: &str = ".fold";

/// The format of a kept fold. Raise it whenever what [`SessionFold`] holds, or how an event folds,
/// changes in a file [`SOURCE`] does not name: a fold kept by another format is not read.
const FORMAT: u32 = 1;

/// The source that gives a fold its meaning (the fold, the events and how they read, question
/// keys, policies and rule effects). Its hash is sealed into every kept fold, so a build whose fold
/// reads events differently never starts from a fold an earlier build kept, even when nobody
/// raised [`FORMAT`] or the version.
const SOURCE: &str = concat!(
    include_str!("fold.rs"),
    include_str!("question_key.rs"),
    include_str!("event/mod.rs"),
    include_str!("event/record.rs"),
    include_str!("../policy.rs"),
    include_str!("../answer.rs"),
);

/// FNV-1a of [`SOURCE`], computed when the host is compiled.
const SOURCE_HASH: u64 = fnv1a(SOURCE.as_bytes());

const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

/// How much larger than its log a kept fold may be (a fold holds less than the records it folds,
/// but spells question ids its own way): a larger file is not read at all.
pub const MOST_OVER_LOG: u64 = 64 * 1024;

/// What the MAC covers before the session id and the body.
const MAC_CONTEXT: &[u8] = b"approval-host kept fold\0";

/// The length of the MAC at the head of the file.
const MAC_LEN: usize = 32;

/// The secret kept folds are sealed with.
#[derive(Clone)]
pub struct FoldKey([u8; 32]);

impl std::fmt::Debug for FoldKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FoldKey(..)")
    }
}

impl FoldKey {
    /// A key from its bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> FoldKey {
        FoldKey(bytes)
    }

    fn mac(&self, session: &str, body: &[u8]) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(MAC_CONTEXT);
        mac.update(&FORMAT.to_le_bytes());
        mac.update(&SOURCE_HASH.to_le_bytes());
        mac.update(env!("CARGO_PKG_VERSION").as_bytes());
        mac.update(b"\0");
        mac.update(session.as_bytes());
        mac.update(b"\0");
        mac.update(body);
        mac
    }
}

/// Where a store finds the key, looked for the first time a log is opened (finding it may mean
/// making it), and not again.
pub struct KeySource {
    key: OnceLock<Option<FoldKey>>,
    find: Box<dyn Fn() -> Option<FoldKey> + Send + Sync>,
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySource").finish_non_exhaustive()
    }
}

impl KeySource {
    /// A key `find` gives on first need; `None` from it means no fold is kept or read.
    pub fn new(find: impl Fn() -> Option<FoldKey> + Send + Sync + 'static) -> Arc<KeySource> {
        Arc::new(KeySource {
            key: OnceLock::new(),
            find: Box::new(find),
        })
    }

    /// This key.
    pub fn fixed(key: FoldKey) -> Arc<KeySource> {
        Arc::new(KeySource {
            key: OnceLock::from(Some(key)),
            find: Box::new(|| None),
        })
    }

    /// The key, if there is one.
    pub fn get(&self) -> Option<&FoldKey> {
        self.key.get_or_init(|| (self.find)()).as_ref()
    }
}

/// Where a log stood when its fold was kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mark {
    /// Its records.
    pub records: u64,
    /// Its length in bytes (whole lines).
    pub bytes: u64,
    /// The length of its last line, with the newline.
    pub last_line: u64,
    /// The chain value of its last line.
    pub head: Head,
}

impl Mark {
    /// Where the last line the mark covers starts.
    pub fn last_line_start(&self) -> u64 {
        self.bytes - self.last_line
    }

    /// Whether `line` (read at [`Mark::last_line_start`], with its newline) is the line the mark
    /// ends with.
    pub fn ends_with(&self, line: &[u8]) -> bool {
        line.len() as u64 == self.last_line
            && line.ends_with(b"\n")
            && !line[..line.len() - 1].contains(&b'\n')
            && chain::line_hash(line) == self.head
    }
}

/// What an open starts from: a kept fold that fits the log, and how many records it covers.
#[derive(Debug)]
pub struct Resumed {
    /// The fold of the first `records` records.
    pub fold: SessionFold,
    /// The records it covers; the opened log's `records` are the ones after them.
    pub records: u64,
}

#[derive(Serialize)]
#[serde(deny_unknown_fields)]
struct SealedRef<'a> {
    mark: &'a Mark,
    fold: &'a SessionFold,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Sealed {
    mark: Mark,
    fold: SessionFold,
}

/// Why a kept fold was not used (said at debug level: the log is read in full instead).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NotUsed {
    /// The file is shorter than its MAC.
    #[error("it is too short to hold a MAC")]
    Short,
    /// The file is larger than any fold of its log could be.
    #[error("it is larger than any fold of its log")]
    Large,
    /// The MAC does not check: another key, session, format or version, or changed bytes.
    #[error("its MAC does not check under this host's key for this session and version")]
    Mac,
    /// The MAC checks but the body does not read (a bug, or a format raised without its number).
    #[error("it does not read: {0}")]
    Unreadable(String),
    /// The fold is of a log that is no longer there as it was.
    #[error("the log no longer ends its first {0} records where the kept fold says")]
    Stale(u64),
}

/// The file's bytes for `fold` of `session`'s log as far as `mark`.
pub fn seal(key: &FoldKey, session: &str, mark: &Mark, fold: &SessionFold) -> Vec<u8> {
    let mut out = vec![0u8; MAC_LEN];
    serde_json::to_writer(&mut out, &SealedRef { mark, fold })
        .expect("a fold serializes: its maps are keyed by strings");
    let tag = key.mac(session, &out[MAC_LEN..]).finalize().into_bytes();
    out[..MAC_LEN].copy_from_slice(&tag);
    out
}

/// The mark and fold in `bytes`, when they were sealed with `key` for `session` by this format
/// and version of the host.
///
/// # Errors
/// Why they cannot be used.
pub fn unseal(key: &FoldKey, session: &str, bytes: &[u8]) -> Result<(Mark, SessionFold), NotUsed> {
    if bytes.len() < MAC_LEN {
        return Err(NotUsed::Short);
    }
    let (tag, body) = bytes.split_at(MAC_LEN);
    key.mac(session, body)
        .verify_slice(tag)
        .map_err(|_| NotUsed::Mac)?;
    // A call's arguments are kept as text, skipped over without counting their depth: the rest
    // nests a few levels, far inside serde_json's limit.
    let sealed: Sealed =
        serde_json::from_slice(body).map_err(|e| NotUsed::Unreadable(e.to_string()))?;
    if sealed.mark.last_line == 0 || sealed.mark.last_line > sealed.mark.bytes {
        return Err(NotUsed::Unreadable(
            "its mark's last line does not lie within the log".to_owned(),
        ));
    }
    Ok((sealed.mark, sealed.fold))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::event::{Event, PolicySwitch};
    use crate::policy::Policy;

    fn key(byte: u8) -> FoldKey {
        FoldKey::from_bytes([byte; 32])
    }

    fn sample() -> (Mark, SessionFold) {
        let mut fold = SessionFold::new();
        fold.push(
            1,
            &Event::Policy(PolicySwitch {
                policy: Policy::Never,
                source: Some("user".to_owned()),
            }),
        )
        .unwrap();
        let line = b"{\"seq\":1}\n";
        let mark = Mark {
            records: 1,
            bytes: 40,
            last_line: line.len() as u64,
            head: chain::line_hash(line),
        };
        (mark, fold)
    }

    #[test]
    fn a_sealed_fold_opens_only_under_its_key_for_its_session_and_unchanged() {
        let (mark, fold) = sample();
        let sealed = seal(&key(1), "s1", &mark, &fold);
        assert_eq!(unseal(&key(1), "s1", &sealed), Ok((mark, fold.clone())));
        assert_eq!(unseal(&key(2), "s1", &sealed), Err(NotUsed::Mac));
        assert_eq!(unseal(&key(1), "s2", &sealed), Err(NotUsed::Mac));
        assert_eq!(unseal(&key(1), "s1", &sealed[..10]), Err(NotUsed::Short));
        assert_eq!(
            unseal(&key(1), "s1", &sealed[..sealed.len() - 1]),
            Err(NotUsed::Mac)
        );
        for i in [0, MAC_LEN, sealed.len() / 2, sealed.len() - 1] {
            let mut changed = sealed.clone();
            changed[i] ^= 1;
            assert_eq!(
                unseal(&key(1), "s1", &changed),
                Err(NotUsed::Mac),
                "byte {i}"
            );
        }
        // A fold that widens the session (`never` switched back to `ask`) sealed without the key.
        let mut widened = fold;
        widened.apply(
            2,
            &Event::Policy(PolicySwitch {
                policy: Policy::Ask,
                source: None,
            }),
        );
        let forged = seal(&key(9), "s1", &mark, &widened);
        assert_eq!(unseal(&key(1), "s1", &forged), Err(NotUsed::Mac));
    }

    #[test]
    fn a_mark_ends_only_with_the_line_it_hashed() {
        let (mark, _) = sample();
        assert!(mark.ends_with(b"{\"seq\":1}\n"));
        assert!(!mark.ends_with(b"{\"seq\":2}\n"));
        assert!(!mark.ends_with(b"{\"seq\":1}\n\n"));
        assert!(!mark.ends_with(b"{\"seq\":1}"));
        assert_eq!(mark.last_line_start(), 40 - 10);
    }
}
