//! A [`Record`]: one event framed as a durable JSON line (its seq, its time and, in the chained
//! format, the hash of the line before), written straight from the event and parsed strictly.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::stamp::Stamp;
use super::{Empty, Event};

/// One durable line of a session log.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Position in the log, from 1, without gaps.
    pub seq: u64,
    /// When the event was appended, RFC 3339 UTC, as the line spells it.
    pub ts: Stamp,
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

/// Writes `text` as a JSON string: as it is when nothing in it needs escaping (the envelope's
/// members always), else escaped as serde_json escapes (a time read from another writer's line).
fn write_str(text: &str, out: &mut Vec<u8>) {
    if text
        .bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b < 0x7f)
    {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        let _ = serde_json::to_writer(&mut *out, text);
    }
}

impl Record {
    /// A record stamped with the current time.
    pub fn now(seq: u64, event: Event) -> Record {
        Record::at(seq, SystemTime::now(), event)
    }

    /// A record stamped with `time`.
    pub fn at(seq: u64, time: SystemTime, event: Event) -> Record {
        Record {
            seq,
            ts: Stamp::at(time),
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
        self.write_wire(Some(&crate::audit::chain::hex_bytes(prev)), out);
    }

    /// Writes `{"v":2,"seq":…,"ts":…,"type":…,"data":{…},"prev":…}` (without `v` and `prev` in
    /// format 1): the envelope by hand, as its members need no escaping (a number, a type name,
    /// hex digits, and a time the writer spelled), the data straight from the event.
    fn write_wire(&self, prev: Option<&[u8; 64]>, out: &mut Vec<u8>) {
        out.push(b'{');
        if prev.is_some() {
            out.extend_from_slice(b"\"v\":");
            out.extend_from_slice(
                itoa::Buffer::new()
                    .format(crate::audit::chain::FORMAT)
                    .as_bytes(),
            );
            out.push(b',');
        }
        out.extend_from_slice(b"\"seq\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.seq).as_bytes());
        out.extend_from_slice(b",\"ts\":");
        write_str(&self.ts, out);
        // Event type names are plain ASCII constants (`types`).
        out.extend_from_slice(b",\"type\":\"");
        out.extend_from_slice(self.event.kind().as_bytes());
        out.extend_from_slice(b"\",\"data\":");
        // Plain structs of strings, numbers, enums and JSON values: serialising cannot fail.
        let _ = serde_json::to_writer(&mut *out, &DataRef(&self.event));
        if let Some(prev) = prev {
            out.extend_from_slice(b",\"prev\":\"");
            out.extend_from_slice(prev);
            out.push(b'"');
        }
        out.extend_from_slice(b"}\n");
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
                ts: Stamp::from(wire.ts),
                event,
            },
            wire.prev,
        ))
    }
}

/// How deep a record's line may nest its JSON (objects and arrays). A line's `data` is read back
/// on its own, and serde_json refuses to read past 127 levels: an event nested deeper would be
/// written and then make its log unreadable (an agent could break its own session's log with
/// deeply nested arguments), so such an event is refused before anything is written. The line
/// and its data take two levels of the reader's 128, and the bound keeps a margin below the rest.
pub const MOST_NESTING: usize = 120;

/// How deep `line` (JSON text) nests objects and arrays, counting only up to `MOST_NESTING + 1`.
pub fn nesting(line: &[u8]) -> usize {
    let (mut depth, mut most) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in line {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > most {
                    most = depth;
                    if most > MOST_NESTING {
                        break;
                    }
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    most
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::event::Decided;
    use crate::outcome::Outcome;

    #[test]
    fn event_type_names_need_no_escaping() {
        for kind in crate::audit::event::types::ALL {
            assert!(
                kind.bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\'),
                "{kind}"
            );
        }
    }

    #[test]
    fn line_round_trips() {
        let r = Record::now(7, Event::Decided(Decided::bare("q", Outcome::Cancelled)));
        let line = r.to_line();
        assert_eq!(*line.last().unwrap(), b'\n');
        let back = Record::parse_line(&line[..line.len() - 1]).unwrap();
        assert_eq!(back, r);
    }
}
