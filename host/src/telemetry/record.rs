//! A settled question as the exporting thread gets it, written by the deciding thread into one
//! shared byte buffer: copying its fields there costs no allocation (the buffer keeps its
//! capacity), where owned strings would cost one each, freed later on another thread.

use std::time::{Duration, SystemTime};

use crate::outcome::{FailureKind, Outcome};
use crate::service::TraceParent;
use crate::service::observe::Settlement;
use crate::waterfall::HopAnswer;

/// One listener's turn, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HopRecord {
    pub(super) listener: String,
    pub(super) version: Option<String>,
    pub(super) outside: bool,
    pub(super) start: Duration,
    pub(super) end: Duration,
    pub(super) answer: HopAnswer,
}

/// A settled question, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) session: String,
    pub(super) question: String,
    pub(super) tool: String,
    pub(super) outcome: Outcome,
    pub(super) answerer: Option<String>,
    pub(super) digest: Option<String>,
    pub(super) failure_plugin: Option<String>,
    pub(super) failure_kind: Option<FailureKind>,
    pub(super) parent: Option<TraceParent>,
    pub(super) started: SystemTime,
    pub(super) asked_durable: Duration,
    pub(super) settled: Duration,
    pub(super) took: Duration,
    pub(super) hops: Vec<HopRecord>,
}

const NONE: u32 = u32::MAX;

fn put_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        // Longer values (none the host makes) are cut rather than refused.
        Some(s) => {
            let s = &s.as_bytes()[..s.len().min(NONE as usize - 1)];
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s);
        }
        None => out.extend_from_slice(&NONE.to_le_bytes()),
    }
}

fn put_duration(out: &mut Vec<u8>, d: Duration) {
    out.extend_from_slice(&(d.as_nanos() as u64).to_le_bytes());
}

fn outcome_index(outcome: Outcome) -> u8 {
    Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0) as u8
}

fn kind_index(kind: Option<FailureKind>) -> u8 {
    kind.and_then(|k| FailureKind::ALL.iter().position(|x| *x == k))
        .map_or(u8::MAX, |i| i as u8)
}

/// Appends `s`'s record to `out`; `false` (nothing written) when it has no detail or its
/// caller did not sample the trace (the caller's sampling decision is kept).
pub(super) fn encode(s: &Settlement<'_>, out: &mut Vec<u8>) -> bool {
    let Some(d) = s.detail else { return false };
    if d.parent.is_some_and(|p| !p.sampled()) {
        return false;
    }
    let started = d
        .started
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    put_duration(out, started);
    put_duration(out, d.asked_durable);
    put_duration(out, d.settled);
    put_duration(out, s.took);
    out.push(outcome_index(s.outcome));
    match d.parent {
        Some(p) => {
            out.push(1);
            out.extend_from_slice(&p.trace_id);
            out.extend_from_slice(&p.parent_id);
            out.push(p.flags);
        }
        None => out.push(0),
    }
    put_str(out, Some(d.session));
    put_str(out, Some(d.question));
    put_str(out, Some(d.tool));
    put_str(out, s.answerer);
    put_str(out, d.digest);
    put_str(out, s.failure.and_then(|f| f.plugin.as_deref()));
    out.push(kind_index(s.failure.map(|f| f.kind)));
    out.extend_from_slice(&(d.hops.len().min(u16::MAX as usize) as u16).to_le_bytes());
    for hop in d.hops.iter().take(u16::MAX as usize) {
        put_str(out, Some(&hop.listener));
        put_str(out, hop.version.as_deref());
        out.push(u8::from(hop.outside));
        put_duration(out, hop.start);
        put_duration(out, hop.end);
        let (tag, value) = match hop.answer {
            HopAnswer::Next => (0, 0),
            HopAnswer::Decided(o) => (1, outcome_index(o)),
            HopAnswer::Failed(kind) => (2, kind_index(Some(kind))),
        };
        out.push(tag);
        out.push(value);
    }
    true
}

/// Reads the records `encode` wrote, in order.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let (head, rest) = self.bytes.split_at(n.min(self.bytes.len()));
        self.bytes = rest;
        head
    }

    fn u8(&mut self) -> u8 {
        self.take(1).first().copied().unwrap_or(0)
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0; N];
        let head = self.take(N);
        a[..head.len()].copy_from_slice(head);
        a
    }

    fn duration(&mut self) -> Duration {
        Duration::from_nanos(u64::from_le_bytes(self.array()))
    }

    fn outcome(&mut self) -> Outcome {
        Outcome::ALL
            .get(self.u8() as usize)
            .copied()
            .unwrap_or(Outcome::Unavailable)
    }

    fn kind(&mut self) -> Option<FailureKind> {
        FailureKind::ALL.get(self.u8() as usize).copied()
    }

    fn string(&mut self) -> Option<String> {
        let n = u32::from_le_bytes(self.array());
        if n == NONE {
            return None;
        }
        Some(String::from_utf8_lossy(self.take(n as usize)).into_owned())
    }
}

/// Every record in `bytes`.
pub(super) fn decode(bytes: &[u8]) -> Vec<Record> {
    let mut r = Reader { bytes };
    let mut out = Vec::new();
    while !r.bytes.is_empty() {
        let started = SystemTime::UNIX_EPOCH + r.duration();
        let asked_durable = r.duration();
        let settled = r.duration();
        let took = r.duration();
        let outcome = r.outcome();
        let parent = (r.u8() == 1).then(|| TraceParent {
            trace_id: r.array(),
            parent_id: r.array(),
            flags: r.u8(),
        });
        let mut record = Record {
            session: r.string().unwrap_or_default(),
            question: r.string().unwrap_or_default(),
            tool: r.string().unwrap_or_default(),
            outcome,
            answerer: r.string(),
            digest: r.string(),
            failure_plugin: r.string(),
            failure_kind: r.kind(),
            parent,
            started,
            asked_durable,
            settled,
            took,
            hops: Vec::new(),
        };
        let hops = u16::from_le_bytes(r.array());
        for _ in 0..hops {
            record.hops.push(HopRecord {
                listener: r.string().unwrap_or_default(),
                version: r.string(),
                outside: r.u8() == 1,
                start: r.duration(),
                end: r.duration(),
                answer: match r.u8() {
                    0 => {
                        r.u8();
                        HopAnswer::Next
                    }
                    1 => HopAnswer::Decided(r.outcome()),
                    _ => HopAnswer::Failed(r.kind().unwrap_or(FailureKind::Error)),
                },
            });
        }
        out.push(record);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::audit::event::FailureRecord;
    use crate::outcome::FailureKind;
    use crate::service::observe::Detail;
    use crate::waterfall::Hop;

    #[test]
    fn records_round_trip_through_the_buffer() {
        let parent: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .unwrap();
        let hops = [
            Hop {
                listener: Arc::from("rules"),
                version: None,
                outside: false,
                start: Duration::from_nanos(10),
                end: Duration::from_nanos(20),
                answer: HopAnswer::Next,
            },
            Hop {
                listener: Arc::from("gate"),
                version: Some(Arc::from("abc")),
                outside: false,
                start: Duration::from_nanos(30),
                end: Duration::from_nanos(40),
                answer: HopAnswer::Failed(FailureKind::Trap),
            },
        ];
        let started = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let detail = Detail {
            session: "s1",
            question: "q1",
            tool: "Bash",
            digest: Some("abc"),
            parent: Some(parent),
            started,
            asked_durable: Duration::from_nanos(5),
            hops: &hops,
            settled: Duration::from_nanos(45),
        };
        let failure = FailureRecord {
            plugin: Some("gate".into()),
            kind: FailureKind::Trap,
        };
        let settlement = Settlement {
            outcome: Outcome::Unavailable,
            answerer: None,
            outside: false,
            failure: Some(&failure),
            rule: None,
            took: Duration::from_nanos(50),
            detail: Some(&detail),
        };
        let mut buffer = Vec::new();
        assert!(encode(&settlement, &mut buffer));
        assert!(encode(&settlement, &mut buffer));
        let records = decode(&buffer);
        assert_eq!(records.len(), 2);
        assert_eq!(records[0], records[1]);
        let r = &records[0];
        assert_eq!(
            (r.session.as_str(), r.question.as_str(), r.tool.as_str()),
            ("s1", "q1", "Bash")
        );
        assert_eq!(r.outcome, Outcome::Unavailable);
        assert_eq!(r.parent, Some(parent));
        assert_eq!(r.started, started);
        assert_eq!(
            (r.asked_durable, r.settled, r.took),
            (
                Duration::from_nanos(5),
                Duration::from_nanos(45),
                Duration::from_nanos(50)
            )
        );
        assert_eq!(
            (r.failure_plugin.as_deref(), r.failure_kind),
            (Some("gate"), Some(FailureKind::Trap))
        );
        assert_eq!(r.hops[0].answer, HopAnswer::Next);
        assert_eq!(r.hops[1].answer, HopAnswer::Failed(FailureKind::Trap));
        assert_eq!(r.hops[1].version.as_deref(), Some("abc"));

        // An unsampled caller's question is not recorded at all.
        let unsampled = Detail {
            parent: Some(TraceParent { flags: 0, ..parent }),
            ..detail
        };
        let mut empty = Vec::new();
        assert!(!encode(
            &Settlement {
                detail: Some(&unsampled),
                ..settlement
            },
            &mut empty
        ));
        assert!(empty.is_empty());
    }
}
