//! How every record commits to the one before it.
//!
//! A chained line (log format 2) carries `"v": 2` and `"prev"`: the SHA-256, in lowercase hex, of
//! the exact bytes of the line before it (without its newline). The first line of a session
//! commits to a genesis value that names the session, so a line moved from another session, or a
//! changed, removed, reordered or inserted line, breaks the chain at the line after it. Lines
//! written before chaining (format 1) carry neither field; a log that starts with them is read as
//! unchained up to its first chained line, not as tampered with.

use sha2::{Digest, Sha256};

/// The log format of chained lines.
pub const FORMAT: u64 = 2;

/// A chain value: the SHA-256 of a line, or the genesis of a session.
pub type Head = [u8; 32];

/// What the first line of `session` commits to.
pub fn genesis(session: &str) -> Head {
    let mut h = Sha256::new();
    h.update(b"approval-host session log genesis\n");
    h.update(session.as_bytes());
    h.finalize().into()
}

/// The chain value of a line: its SHA-256, over its bytes without the newline.
pub fn line_hash(line: &[u8]) -> Head {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    Sha256::digest(line).into()
}

/// Lowercase hex of a chain value, as `prev` spells it.
pub fn hex(head: &Head) -> String {
    hex_of(head)
}

/// Lowercase hex of any bytes (keys and signatures are spelled the same way).
pub fn hex_of(bytes: &[u8]) -> String {
    bytes
        .iter()
        .flat_map(|&b| hex_pair(b))
        .map(char::from)
        .collect()
}

/// The two lowercase hex digits of a byte.
fn hex_pair(b: u8) -> [u8; 2] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    [DIGITS[(b >> 4) as usize], DIGITS[(b & 15) as usize]]
}

/// [`hex`] into a buffer on the stack (the writer spells one per line).
pub fn hex_bytes(head: &Head) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (pair, &b) in out.chunks_exact_mut(2).zip(head) {
        pair.copy_from_slice(&hex_pair(b));
    }
    out
}

/// Whether `text` is the lowercase hex spelling of `head` (without building the string).
pub fn hex_is(text: &str, head: &Head) -> bool {
    text.len() == 64
        && text
            .as_bytes()
            .chunks_exact(2)
            .zip(head)
            .all(|(pair, &b)| pair == hex_pair(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn genesis_names_the_session_and_hex_is_lowercase() {
        assert_ne!(genesis("a"), genesis("b"));
        let h = hex(&line_hash(b"x\n"));
        assert_eq!(h, hex(&line_hash(b"x")));
        assert_eq!(h.len(), 64);
        assert!(
            h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
    }
}
