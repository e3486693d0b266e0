//! A record's `ts`: its time in RFC 3339 UTC, spelled as the line spells it and held inline.
//!
//! Every event the host writes is stamped, so the stamp is on the decision path twice per
//! question; held in a `String` it was an allocation each time. The writer's own spelling
//! (microseconds, `Z`) is 27 bytes; a line written elsewhere may carry more fractional digits,
//! which are kept as read, on the heap.

use std::fmt;
use std::ops::Deref;
use std::time::SystemTime;

/// The last moment RFC 3339 (and so the writer) can spell.
const LAST: &str = "9999-12-31T23:59:59.999999Z";

/// The longest spelling held inline: nanoseconds and `Z` need 30 bytes.
const INLINE: usize = 30;

/// A record's time, exactly as its line spells it.
#[derive(Clone)]
pub struct Stamp(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

impl Stamp {
    /// `time` as the writer spells it: RFC 3339 UTC with microseconds. A clock past the year
    /// 9999, which RFC 3339 cannot spell, is written as its last moment: a line that reads back,
    /// never an empty time that would make the log unreadable from there on.
    pub fn at(time: SystemTime) -> Stamp {
        let mut out = Inline::default();
        let spelled = fmt::Write::write_fmt(
            &mut out,
            format_args!("{}", humantime::format_rfc3339_micros(time)),
        );
        match spelled {
            Ok(()) => Stamp(Repr::Inline {
                len: out.len as u8,
                bytes: out.bytes,
            }),
            Err(_) => Stamp::from(LAST),
        }
    }

    /// The spelling.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Only whole UTF-8 strings are ever copied in (`From<&str>`, `Inline`).
            Repr::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..*len as usize]).unwrap_or_default()
            }
            Repr::Heap(text) => text,
        }
    }
}

/// A fixed buffer that `fmt::Write` fills; writing past its end is an error, not a truncation.
struct Inline {
    len: usize,
    bytes: [u8; INLINE],
}

impl Default for Inline {
    fn default() -> Self {
        Inline {
            len: 0,
            bytes: [0; INLINE],
        }
    }
}

impl fmt::Write for Inline {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let room = self.bytes.get_mut(self.len..end).ok_or(fmt::Error)?;
        room.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl From<&str> for Stamp {
    fn from(text: &str) -> Stamp {
        let mut inline = Inline::default();
        match fmt::Write::write_str(&mut inline, text) {
            Ok(()) => Stamp(Repr::Inline {
                len: inline.len as u8,
                bytes: inline.bytes,
            }),
            Err(_) => Stamp(Repr::Heap(text.into())),
        }
    }
}

impl From<String> for Stamp {
    fn from(text: String) -> Stamp {
        if text.len() <= INLINE {
            Stamp::from(text.as_str())
        } else {
            Stamp(Repr::Heap(text.into_boxed_str()))
        }
    }
}

impl Deref for Stamp {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Stamp {
    fn eq(&self, other: &Stamp) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Stamp {}

impl PartialEq<str> for Stamp {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Stamp {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writers_spelling_is_held_inline_and_any_other_as_read() {
        let now = Stamp::at(SystemTime::now());
        assert_eq!(now.len(), "2026-12-07T02:47:17.123456Z".len());
        assert!(matches!(now.0, Repr::Inline { .. }));
        assert!(humantime::parse_rfc3339(&now).is_ok());

        let nanos = "2026-12-07T02:47:17.123456789Z";
        assert_eq!(Stamp::from(nanos), nanos);
        assert!(matches!(Stamp::from(nanos).0, Repr::Inline { .. }));
        let long = "2026-12-07T02:47:17.1234567891234567Z";
        assert_eq!(Stamp::from(long.to_owned()), long);
        assert!(matches!(Stamp::from(long).0, Repr::Heap(_)));
        assert_eq!(format!("{:?}", Stamp::from(nanos)), format!("{nanos:?}"));

        let far = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(400 * 365 * 86_400 * 100);
        assert_eq!(Stamp::at(far), LAST);
        assert!(humantime::parse_rfc3339(LAST).is_ok());
    }
}
