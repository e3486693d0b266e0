//! A [`Record`]: one event framed as a durable JSON line (its seq, its time and, in the chained
//! format, the hash of the line before), written straight from the event and parsed strictly.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::{Empty, Event};

/// One durable line of a session log.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Position in the log, from 1, without gaps.
    pub seq: u64,
    /// When the event was appended, RFC 3339 UTC.
    pub ts: String,
    /// The event.
    pub event: Event,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRecord<'a> {
    /// The log format: absent in format 1 (unchained), `2` in chained lines.
    #[serde(default)]
    v: Option<u64>,
    seq: u64,
    ts: String,
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    /// Parsed once, straight into the event's type.
    #[serde(borrow)]
    data: &'a serde_json::value::RawValue,
    /// Format 2: the SHA-256 (hex) of the line before, or of the session's genesis.
    #[serde(default)]
    prev: Option<String>,
}

#[derive(Serialize)]
struct WireRef<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    v: Option<u64>,
    seq: u64,
    ts: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    data: DataRef<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prev: Option<&'a str>,
}

/// An event's `data`, serialised from the event in place.
struct DataRef<'a>(&'a Event);

impl Serialize for DataRef<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Event::TurnStart | Event::TurnEnd => Empty {}.serialize(serializer),
            Event::TurnEndBy(d) => d.serialize(serializer),
            Event::ToolCall(d) => d.serialize(serializer),
            Event::ToolResult(d) => d.serialize(serializer),
            Event::Asked(d) => d.serialize(serializer),
            Event::Decided(d) => d.serialize(serializer),
            Event::Policy(d) => d.serialize(serializer),
            Event::HookInvoked(d) => d.serialize(serializer),
            Event::HookResult(d) => d.serialize(serializer),
            Event::Sandbox(d) => d.serialize(serializer),
            Event::RuleAdded(d) => d.serialize(serializer),
            Event::RuleRevoked(d) => d.serialize(serializer),
            Event::Shadowed(d) => d.serialize(serializer),
            Event::Unasked(d) => d.serialize(serializer),
            Event::McpMessage(d) => d.serialize(serializer),
            Event::McpPinned(d) => d.serialize(serializer),
            Event::McpPinWanted(d) => d.serialize(serializer),
        }
    }
}

impl Record {
    /// A record stamped with the current time.
    pub fn now(seq: u64, event: Event) -> Record {
        Record {
            seq,
            ts: humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
            event,
        }
    }

    /// The record as one JSON line, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = Vec::with_capacity(128);
        self.write_line(&mut line);
        line
    }

    /// Appends the record's unchained (format 1) JSON line, newline included, to `out`: encoded
    /// straight from the event, without an intermediate JSON tree.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        self.write_wire(None, out);
    }

    /// Appends the record's chained (format 2) line, committing to `prev` (the previous line's
    /// chain value, or the session's genesis), newline included, to `out`.
    pub fn write_chained_line(&self, prev: &crate::audit::chain::Head, out: &mut Vec<u8>) {
        let hex = crate::audit::chain::hex_bytes(prev);
        // Hex digits are ASCII.
        let prev = std::str::from_utf8(&hex).unwrap_or_default();
        self.write_wire(Some(prev), out);
    }

    fn write_wire(&self, prev: Option<&str>, out: &mut Vec<u8>) {
        let wire = WireRef {
            v: prev.map(|_| crate::audit::chain::FORMAT),
            seq: self.seq,
            ts: &self.ts,
            kind: self.event.kind(),
            data: DataRef(&self.event),
            prev,
        };
        // Plain structs of strings, numbers, enums and JSON values: serialising cannot fail.
        let _ = serde_json::to_writer(&mut *out, &wire);
        out.push(b'\n');
    }

    /// Parses one line (without its newline), chained or not.
    pub fn parse_line(line: &[u8]) -> Result<Record, String> {
        Self::parse_linked(line).map(|(record, _)| record)
    }

    /// Parses one line (without its newline), also returning its `prev` link when it is a
    /// chained (format 2) line.
    pub fn parse_linked(line: &[u8]) -> Result<(Record, Option<String>), String> {
        let wire: WireRecord = serde_json::from_slice(line).map_err(|e| e.to_string())?;
        match (wire.v, &wire.prev) {
            (None, None) => {}
            (Some(crate::audit::chain::FORMAT), Some(prev))
                if prev.len() == 64
                    && prev.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => {}
            (Some(crate::audit::chain::FORMAT), Some(prev)) => {
                return Err(format!("prev {prev:?} is not a SHA-256 in lowercase hex"));
            }
            (Some(v), _) if v != crate::audit::chain::FORMAT => {
                return Err(format!(
                    "log format {v} is not one this host reads (1 or 2)"
                ));
            }
            _ => return Err("\"v\" and \"prev\" go together".to_owned()),
        }
        humantime::parse_rfc3339(&wire.ts).map_err(|e| format!("ts {:?}: {e}", wire.ts))?;
        let event =
            Event::from_raw_parts(&wire.kind, wire.data.get()).map_err(|e| e.to_string())?;
        Ok((
            Record {
                seq: wire.seq,
                ts: wire.ts,
                event,
            },
            wire.prev,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::event::Decided;
    use crate::outcome::Outcome;

    #[test]
    fn line_round_trips() {
        let r = Record::now(7, Event::Decided(Decided::bare("q", Outcome::Cancelled)));
        let line = r.to_line();
        assert_eq!(*line.last().unwrap(), b'\n');
        let back = Record::parse_line(&line[..line.len() - 1]).unwrap();
        assert_eq!(back, r);
    }
}
