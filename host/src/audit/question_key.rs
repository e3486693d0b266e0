//! A question id as a session's fold keeps it: the host's own ids (UUIDs, lowercase and
//! hyphenated) as their 128 bits, any other id as written.
//!
//! The fold remembers every id a session asked, to refuse one asked twice; held as a `String` that
//! was an allocation per question on the decision path. The mapping is exact both ways: only the
//! one canonical spelling becomes a number, so two different ids never share a key.

/// A question id, exactly.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum QuestionKey {
    /// A UUID in its canonical spelling (`8-4-4-4-12` lowercase hex digits).
    Uuid(u128),
    /// Any other id, as written.
    Other(Box<str>),
}

/// Where the canonical spelling puts its hyphens.
const HYPHENS: [usize; 4] = [8, 13, 18, 23];

impl QuestionKey {
    /// The key of `id`: allocates only for an id that is not a canonical UUID.
    pub(crate) fn of(id: &str) -> QuestionKey {
        match uuid_bits(id) {
            Some(bits) => QuestionKey::Uuid(bits),
            None => QuestionKey::Other(id.into()),
        }
    }

    /// The id, spelled as it was written.
    pub(crate) fn id(&self) -> String {
        match self {
            QuestionKey::Uuid(bits) => {
                let mut out = String::with_capacity(36);
                for shift in (0..32).rev().map(|n| n * 4) {
                    if HYPHENS.contains(&out.len()) {
                        out.push('-');
                    }
                    let nibble = ((bits >> shift) & 0xf) as u32;
                    out.extend(char::from_digit(nibble, 16));
                }
                out
            }
            QuestionKey::Other(text) => text.to_string(),
        }
    }
}

/// The 128 bits of `id` when it is a UUID in its canonical spelling.
fn uuid_bits(id: &str) -> Option<u128> {
    let bytes = id.as_bytes();
    if bytes.len() != 36 {
        return None;
    }
    let mut bits = 0u128;
    for (i, &b) in bytes.iter().enumerate() {
        if HYPHENS.contains(&i) {
            if b != b'-' {
                return None;
            }
            continue;
        }
        let nibble = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        bits = (bits << 4) | u128::from(nibble);
    }
    Some(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_canonical_spelling_becomes_a_number_and_every_id_comes_back_as_written() {
        let canonical = "0b0e9f4c-3f6e-4a47-9a36-5c1c4d2e8f10";
        assert!(matches!(QuestionKey::of(canonical), QuestionKey::Uuid(_)));
        for id in [
            canonical,
            "0B0E9F4C-3F6E-4A47-9A36-5C1C4D2E8F10",
            "0b0e9f4c3f6e4a479a365c1c4d2e8f10",
            "{0b0e9f4c-3f6e-4a47-9a36-5c1c4d2e8f10}",
            "0b0e9f4c-3f6e-4a47-9a36_5c1c4d2e8f10",
            "0b0e9f4c-3f6e-4a47-9a36-5c1c4d2e8f1g",
            "q1",
            "",
        ] {
            let key = QuestionKey::of(id);
            assert_eq!(key.id(), id);
        }
        assert!(matches!(
            QuestionKey::of("0B0E9F4C-3F6E-4A47-9A36-5C1C4D2E8F10"),
            QuestionKey::Other(_)
        ));
        assert_ne!(
            QuestionKey::of(canonical),
            QuestionKey::of("0B0E9F4C-3F6E-4A47-9A36-5C1C4D2E8F10")
        );
        assert_ne!(
            QuestionKey::of(canonical),
            QuestionKey::of("0b0e9f4c-3f6e-4a47-9a36-5c1c4d2e8f11")
        );
        let fresh = uuid::Uuid::new_v4().to_string();
        assert_eq!(QuestionKey::of(&fresh).id(), fresh);
    }
}
