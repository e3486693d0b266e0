//! One settled question as a span tree: `approval.request` (a child of the caller's span when it
//! passed one), and under it, in time order, `approval.commit` for the question's record,
//! `approval.listener` for each listener it reached (`approval.wait` for one that leaves the
//! process: a person or a client answering) and `approval.commit` for the decision's record.
//! Spans are made after the fact, with the times the question recorded.

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;

use crate::audit::event::{FailureRecord, types};
use crate::outcome::Outcome;
use crate::service::TraceParent;
use crate::service::observe::Settlement;
use crate::waterfall::{Hop, HopAnswer};

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

/// A settled question, owned, as the exporting thread gets it.
pub(super) struct Record {
    session: String,
    question: String,
    tool: String,
    outcome: Outcome,
    answerer: Option<String>,
    digest: Option<String>,
    failure: Option<FailureRecord>,
    parent: Option<TraceParent>,
    started: SystemTime,
    asked_durable: Duration,
    settled: Duration,
    took: Duration,
    hops: Vec<Hop>,
}

impl Record {
    /// The record of `s`, when it carries its detail.
    pub(super) fn of(s: &Settlement<'_>) -> Option<Record> {
        let d = s.detail?;
        Some(Record {
            session: d.session.to_owned(),
            question: d.question.to_owned(),
            tool: d.tool.to_owned(),
            outcome: s.outcome,
            answerer: s.answerer.map(str::to_owned),
            digest: d.digest.map(str::to_owned),
            failure: s.failure.cloned(),
            parent: d.parent,
            started: d.started,
            asked_durable: d.asked_durable,
            settled: d.settled,
            took: s.took,
            hops: d.hops.to_vec(),
        })
    }
}

fn parent_context(parent: Option<TraceParent>) -> Context {
    match parent {
        Some(p) => Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from_bytes(p.trace_id),
            SpanId::from_bytes(p.parent_id),
            TraceFlags::new(p.flags),
            true,
            TraceState::default(),
        )),
        None => Context::new(),
    }
}

/// Emits `record`'s spans on `tracer`.
pub(super) fn emit(tracer: &SdkTracer, r: &Record) {
    let at = |offset: Duration| r.started + offset;
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
    if let Some(f) = &r.failure {
        if let Some(p) = &f.plugin {
            attributes.push(KeyValue::new(attribute::FAILURE_PLUGIN, p.clone()));
        }
        attributes.push(KeyValue::new(attribute::FAILURE_KIND, f.kind.as_str()));
    }
    let mut root = tracer
        .span_builder(span::REQUEST)
        .with_kind(SpanKind::Server)
        .with_start_time(r.started)
        .with_attributes(attributes)
        .start_with_context(tracer, &parent_context(r.parent));
    if let Some(f) = &r.failure {
        use opentelemetry::trace::Span as _;
        root.set_status(Status::error(format!("a listener failed: {}", f.kind)));
    }
    let cx = Context::new().with_span(root);
    let child = |name: &'static str,
                 start: Duration,
                 end: Duration,
                 attributes: Vec<KeyValue>,
                 status: Option<Status>| {
        use opentelemetry::trace::Span as _;
        let mut span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_start_time(at(start))
            .with_attributes(attributes)
            .start_with_context(tracer, &cx);
        if let Some(status) = status {
            span.set_status(status);
        }
        span.end_with_timestamp(at(end));
    };
    child(
        span::COMMIT,
        Duration::ZERO,
        r.asked_durable,
        vec![KeyValue::new(attribute::RECORD, types::APPROVAL_ASKED)],
        None,
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
            attributes.push(KeyValue::new(attribute::DIGEST, v.to_string()));
        }
        if let HopAnswer::Failed(kind) = hop.answer {
            attributes.push(KeyValue::new(attribute::FAILURE_KIND, kind.as_str()));
        }
        let name = if hop.outside {
            span::WAIT
        } else {
            span::LISTENER
        };
        let status = match hop.answer {
            HopAnswer::Failed(kind) => Some(Status::error(kind.as_str())),
            _ => None,
        };
        child(name, hop.start, hop.end, attributes, status);
    }
    child(
        span::COMMIT,
        r.settled,
        r.took,
        vec![KeyValue::new(attribute::RECORD, types::APPROVAL_DECIDED)],
        None,
    );
    cx.span().end_with_timestamp(at(r.took));
}
