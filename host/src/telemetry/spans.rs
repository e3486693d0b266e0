//! One settled question as a span tree: `approval.request` (a child of the caller's span when it
//! passed one), and under it, in time order, `approval.commit` for the question's record,
//! `approval.listener` for each listener it reached (`approval.wait` for one that leaves the
//! process: a person or a client answering) and `approval.commit` for the decision's record.
//! Spans are made after the fact, on the exporting thread, with the times the question recorded.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};

use super::record::Record;
use crate::audit::event::types;
use crate::waterfall::HopAnswer;

/// Span names.
pub mod span {
    /// One question, from the request to its durable decision.
    pub const REQUEST: &str = "approval.request";
    /// An in-process listener's turn (a rule book, a protection, a plugin).
    pub const LISTENER: &str = "approval.listener";
    /// A listener outside the process (a person on the console, a client) answering.
    pub const WAIT: &str = "approval.wait";
    /// A record made durable in the store.
    pub const COMMIT: &str = "approval.commit";
}

/// Attribute keys.
pub mod attribute {
    /// The session id.
    pub const SESSION: &str = "approval.session";
    /// The question id (`approval/asked` `id`).
    pub const QUESTION: &str = "approval.question";
    /// The tool asked about.
    pub const TOOL: &str = "approval.tool";
    /// The outcome (`allowed-once`, `rejected`, `cancelled`, `unavailable`).
    pub const OUTCOME: &str = "approval.outcome";
    /// Who decided (`rule:<id>`, a plugin's or answerer's name).
    pub const ANSWERER: &str = "approval.answerer";
    /// The deciding or failing plugin's component digest.
    pub const DIGEST: &str = "approval.digest";
    /// The plugin that failed.
    pub const FAILURE_PLUGIN: &str = "approval.failure.plugin";
    /// How it failed (`trap`, `timeout`, ...).
    pub const FAILURE_KIND: &str = "approval.failure.kind";
    /// A listener's name.
    pub const LISTENER: &str = "approval.listener";
    /// What a listener answered: `next`, an outcome, or `failed`.
    pub const DECISION: &str = "approval.decision";
    /// The record a commit made durable (`approval/asked`, `approval/decided`).
    pub const RECORD: &str = "approval.record";
}

/// What a listener that failed answered, as [`attribute::DECISION`] says it.
pub const FAILED: &str = "failed";
/// What a listener that passed the question on answered.
pub const NEXT: &str = "next";

/// Makes spans: ids and the instrumentation scope they name.
pub(super) struct Spans {
    ids: RandomIdGenerator,
    scope: InstrumentationScope,
}

impl Spans {
    pub(super) fn new() -> Self {
        Spans {
            ids: RandomIdGenerator::default(),
            scope: InstrumentationScope::builder("approval-host")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        }
    }

    /// Appends `r`'s spans to `out`: the request span first, then its children in time order.
    pub(super) fn of(&self, r: &Record, out: &mut Vec<SpanData>) {
        let at = |offset: Duration| r.started + offset;
        let trace_id = match r.parent {
            Some(p) => TraceId::from_bytes(p.trace_id),
            None => self.ids.new_trace_id(),
        };
        let root_id = self.ids.new_span_id();
        let span = |id: SpanId,
                    parent: SpanId,
                    remote: bool,
                    kind: SpanKind,
                    name: &'static str,
                    (start, end): (SystemTime, SystemTime),
                    attributes: Vec<KeyValue>,
                    status: Status| SpanData {
            span_context: SpanContext::new(
                trace_id,
                id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: remote,
            span_kind: kind,
            name: Cow::Borrowed(name),
            start_time: start,
            end_time: end,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        };
        let mut attributes = vec![
            KeyValue::new(attribute::SESSION, r.session.clone()),
            KeyValue::new(attribute::QUESTION, r.question.clone()),
            KeyValue::new(attribute::TOOL, r.tool.clone()),
            KeyValue::new(attribute::OUTCOME, r.outcome.as_str()),
        ];
        if let Some(a) = &r.answerer {
            attributes.push(KeyValue::new(attribute::ANSWERER, a.clone()));
        }
        if let Some(d) = &r.digest {
            attributes.push(KeyValue::new(attribute::DIGEST, d.clone()));
        }
        let mut status = Status::Unset;
        if let Some(p) = &r.failure_plugin {
            attributes.push(KeyValue::new(attribute::FAILURE_PLUGIN, p.clone()));
        }
        if let Some(kind) = r.failure_kind {
            attributes.push(KeyValue::new(attribute::FAILURE_KIND, kind.as_str()));
            status = Status::error(format!("a listener failed: {kind}"));
        }
        out.push(span(
            root_id,
            r.parent
                .map_or(SpanId::INVALID, |p| SpanId::from_bytes(p.parent_id)),
            r.parent.is_some(),
            SpanKind::Server,
            span::REQUEST,
            (r.started, at(r.took)),
            attributes,
            status,
        ));
        let mut child = |name, start, end, attributes, status| {
            out.push(span(
                self.ids.new_span_id(),
                root_id,
                false,
                SpanKind::Internal,
                name,
                (at(start), at(end)),
                attributes,
                status,
            ));
        };
        child(
            span::COMMIT,
            Duration::ZERO,
            r.asked_durable,
            vec![KeyValue::new(attribute::RECORD, types::APPROVAL_ASKED)],
            Status::Unset,
        );
        for hop in &r.hops {
            let mut attributes = vec![
                KeyValue::new(attribute::LISTENER, hop.listener.clone()),
                KeyValue::new(
                    attribute::DECISION,
                    match hop.answer {
                        HopAnswer::Next => NEXT,
                        HopAnswer::Decided(outcome) => outcome.as_str(),
                        HopAnswer::Failed(_) => FAILED,
                    },
                ),
            ];
            if let Some(v) = &hop.version {
                attributes.push(KeyValue::new(attribute::DIGEST, v.clone()));
            }
            let mut status = Status::Unset;
            if let HopAnswer::Failed(kind) = hop.answer {
                attributes.push(KeyValue::new(attribute::FAILURE_KIND, kind.as_str()));
                status = Status::error(kind.as_str());
            }
            let name = if hop.outside {
                span::WAIT
            } else {
                span::LISTENER
            };
            child(name, hop.start, hop.end, attributes, status);
        }
        child(
            span::COMMIT,
            r.settled,
            r.took,
            vec![KeyValue::new(attribute::RECORD, types::APPROVAL_DECIDED)],
            Status::Unset,
        );
    }
}
