//! A question id as a session's fold keeps it: the host's own ids (UUIDs, lowercase and
//! hyphenated) as their 128 bits, any other id as written.
//!
//! The fold remembers every id a session asked, to refuse one asked twice; held as a `String` that
//! was an allocation per question on the decision path. The mapping is exact both ways: only the
//! one canonical spelling becomes a number, so two different ids never share a key.

use uuid::Uuid;

/// A question id, exactly. Kept in a session's kept fold ([`crate::audit::kept`]) as a number
/// or as the text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(crate) enum QuestionKey {
    /// A UUID in its canonical spelling (`8-4-4-4-12` lowercase hex digits).
    Uuid(u128),
    /// Any other id, as written.
    Other(Box<str>),
}

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
            QuestionKey::Uuid(bits) => Uuid::from_u128(*bits).hyphenated().to_string(),
            QuestionKey::Other(text) => text.to_string(),
        }
    }
}

/// The 128 bits of `id` when it is a UUID in its canonical spelling: the uuid crate reads other
/// spellings too (upper case, braces, no hyphens), which are other ids here, so the one it read
/// must spell back exactly as `id`.
fn uuid_bits(id: &str) -> Option<u128> {
    let uuid = Uuid::try_parse(id).ok()?;
    let mut canonical = Uuid::encode_buffer();
    (uuid.hyphenated().encode_lower(&mut canonical) == id).then(|| uuid.as_u128())
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
            "urn:uuid:0b0e9f4c-3f6e-4a47-9a36-5c1c4d2e8f10",
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
