//! A W3C trace context parent (`traceparent`), as a harness passes it so that its trace continues
//! through the host: read from a JSON-RPC request's `_meta.traceparent` or a hook's
//! `TRACEPARENT`. The value comes from the guarded agent's side, so anything but the exact
//! version-00 form is refused (the question is then traced on a trace of its own); a refused
//! value never fails the request.

use std::fmt;
use std::str::FromStr;

/// A parsed `traceparent`: `00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// The trace id (never all zeros).
    pub trace_id: [u8; 16],
    /// The caller's span id, the parent of the host's request span (never all zeros).
    pub parent_id: [u8; 8],
    /// The trace flags (bit 0: the caller sampled this trace).
    pub flags: u8,
}

/// Why a `traceparent` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "traceparent {value:?} is not of the form 00-<32 lowercase hex>-<16 lowercase hex>-<2 lowercase hex> with non-zero ids"
)]
pub struct BadTraceParent {
    /// The refused value, cut to 64 characters.
    pub value: String,
}

impl TraceParent {
    /// Whether the caller sampled the trace.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

fn hex_into(text: &str, out: &mut [u8]) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() != out.len() * 2 {
        return false;
    }
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        // The specification asks for lowercase; uppercase is refused, as its parsers do.
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        match (nibble(pair[0]), nibble(pair[1])) {
            (Some(h), Some(l)) => out[i] = h << 4 | l,
            _ => return false,
        }
    }
    true
}

impl FromStr for TraceParent {
    type Err = BadTraceParent;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let refuse = || BadTraceParent {
            value: value.chars().take(64).collect(),
        };
        // Version 00 has exactly four fields; later versions may add fields, but a host that
        // does not know them keeps to what 00 says rather than guess.
        let mut parts = value.split('-');
        let (Some(version), Some(trace), Some(parent), Some(flags), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(refuse());
        };
        let mut v = [0u8; 1];
        let mut out = TraceParent {
            trace_id: [0; 16],
            parent_id: [0; 8],
            flags: 0,
        };
        let mut f = [0u8; 1];
        if !(hex_into(version, &mut v)
            && v[0] == 0
            && hex_into(trace, &mut out.trace_id)
            && hex_into(parent, &mut out.parent_id)
            && hex_into(flags, &mut f))
            || out.trace_id == [0; 16]
            || out.parent_id == [0; 8]
        {
            return Err(refuse());
        }
        out.flags = f[0];
        Ok(out)
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        for b in self.trace_id {
            write!(f, "{b:02x}")?;
        }
        f.write_str("-")?;
        for b in self.parent_id {
            write!(f, "{b:02x}")?;
        }
        write!(f, "-{:02x}", self.flags)
    }
}

impl fmt::Debug for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceParent({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_specification_example_round_trips() {
        let tp: TraceParent = GOOD.parse().unwrap();
        assert_eq!(tp.to_string(), GOOD);
        assert!(tp.sampled());
        assert_eq!(
            tp.parent_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        let unsampled: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
            .parse()
            .unwrap();
        assert!(!unsampled.sampled());
    }

    #[test]
    fn every_other_form_is_refused() {
        let long = "0".repeat(10_000);
        for bad in [
            "",
            "00",
            "garbage",
            // Zero ids.
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            // Uppercase, short, long, non-hex.
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47360-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
            // Other versions, extra fields, padding, multibyte characters.
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
            "00-4bf92f3577b34da6a3ce929d0e0e47é-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            &long,
        ] {
            let refused = bad.parse::<TraceParent>().unwrap_err();
            assert!(refused.value.chars().count() <= 64, "{bad:?}");
        }
    }
}
