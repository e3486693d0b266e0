//! `serve --metrics ADDR`: Prometheus metrics, `/healthz` and `/readyz` on an address of their
//! own.
//!
//! Each settled question is counted as the service settles it, through its
//! [`DecisionObserver`](crate::service::observe::DecisionObserver) seam (by outcome, by who
//! decided, by failure kind, by the rule that matched, with the time from the request to its
//! durable decision): a few atomic increments on counters made in advance, no allocation for a
//! decision. What is a state rather than an event (plugins loaded or quarantined, shadows'
//! answers, connections and sessions open, questions waiting for a person, what the limits
//! refused, the store's commits and leases) is read when Prometheus scrapes. Labels are bounded:
//! plugin and shadow names, rule ids, outcomes and kinds, never a session or question id.
//!
//! Built on `prometheus-client` (the Prometheus project's own Rust client: typed metric
//! families, the OpenMetrics text format, no global registry). This file keeps the registry and
//! what fills it; `endpoints.rs` serves it, with `/healthz`, `/readyz` and, off loopback, the
//! bearer check.

mod endpoints;

pub use endpoints::{NO_TOKEN, readiness, router};

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::Server;
use crate::outcome::Outcome;
use crate::service::observe::{DecisionObserver, Settlement};

/// The content type of `/metrics` (OpenMetrics text, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Who decided a question, as `approval_questions_total{by}` says it.
pub mod by {
    /// A standing rule (or a `[[rule]]` entry).
    pub const RULE: &str = "rule";
    /// A plugin (or another in-process listener).
    pub const PLUGIN: &str = "plugin";
    /// A person or client outside the process.
    pub const PERSON: &str = "person";
    /// The built-in protection of the deployment's own files.
    pub const PROTECTION: &str = "protection";
    /// The session's `never` policy, before any listener.
    pub const POLICY: &str = "policy";
    /// A listener that failed (the question settled `unavailable`).
    pub const FAILURE: &str = "failure";
    /// Nobody: every listener passed the question on, or it was cancelled first.
    pub const NOBODY: &str = "nobody";
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuestionLabels {
    outcome: String,
    by: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    plugin: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: String,
    effect: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    shadow: String,
    answer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    why: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransportLabels {
    transport: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabels {
    role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TraceLabels {
    result: String,
}

/// Every `by`, in the order of [`by`]'s constants.
const BY: [&str; 7] = [
    by::RULE,
    by::PLUGIN,
    by::PERSON,
    by::PROTECTION,
    by::POLICY,
    by::FAILURE,
    by::NOBODY,
];

/// The commit threads' rounds by latency since the process started, read from `audit::stats`
/// at each scrape (the commit threads count them; they know nothing of Prometheus).
#[derive(Debug)]
struct CommitLatency;

impl prometheus_client::encoding::EncodeMetric for CommitLatency {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        use crate::audit::stats;
        let counts = stats::commit_latency();
        let buckets: Vec<(f64, u64)> = counts
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let bound = match stats::latency_bound(i) {
                    u64::MAX => f64::INFINITY,
                    nanos => nanos as f64 / 1e9,
                };
                (bound, *n)
            })
            .collect();
        let seconds = stats::commits().nanos as f64 / 1e9;
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            seconds,
            counts.iter().sum(),
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

fn histogram() -> Histogram {
    // 50 µs to about 1.6 s, doubling: in-process decisions and a person's answer alike.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// How long a scrape waits for the store's session logs (for `approval_unasked_calls`).
const STORE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// The host's metrics.
pub struct Metrics {
    registry: Registry,
    decision_seconds: Histogram,
    plugin_seconds: Family<PluginLabels, Histogram>,
    plugin_failures: Family<FailureLabels, Counter>,
    rule_hits: Family<RuleLabels, Counter>,
    shadow_answers: Family<ShadowLabels, Gauge>,
    plugins: Family<StateLabels, Gauge>,
    waiting: Gauge,
    waiting_oldest: Gauge<f64, std::sync::atomic::AtomicU64>,
    connections: Family<TransportLabels, Gauge>,
    connections_by_role: Family<RoleLabels, Gauge>,
    sessions: Family<TransportLabels, Gauge>,
    refused: Family<RefusedLabels, Gauge<i64, AtomicI64>>,
    traces: Family<TraceLabels, Gauge<i64, AtomicI64>>,
    traces_dropped: Gauge,
    logs_refused: Counter,
    seen_logs_refused: std::sync::atomic::AtomicU64,
    unasked: Gauge,
    /// Each session log's summary, kept while the log does not grow (the console's kind).
    summaries: Arc<crate::serve::console::sessions::Summaries>,
    rules_untrusted: Gauge,
    commits: Counter,
    committed_records: Counter,
    commit_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    failed_commits: Counter,
    /// The commit figures as last exported, so the counters move by what happened since.
    seen_commits: Mutex<crate::audit::stats::Commits>,
    /// PostgreSQL's leases: renewed, renewal rounds failed, lost, taken over, retried statements.
    leases: [Counter; 5],
    seen_leases: Mutex<crate::audit::stats::Leases>,
    /// `questions` for each (outcome, by), made once: counting a decision allocates nothing.
    question_counters: Vec<((Outcome, &'static str), Counter)>,
    /// Rule counters and plugin histograms already made, found without allocating.
    rule_cache: std::sync::RwLock<HashMap<(String, &'static str), Counter>>,
    plugin_cache: std::sync::RwLock<HashMap<String, Histogram>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl DecisionObserver for Metrics {
    fn settled(&self, d: &Settlement<'_>) {
        let by = match (d.answerer, d.failure) {
            (_, Some(_)) => by::FAILURE,
            _ if d.outside => by::PERSON,
            (Some(a), None) if a.starts_with("rule:") => by::RULE,
            (Some(a), None) if a == crate::rules::protect::GATE_NAME => by::PROTECTION,
            (Some(_), None) => by::PLUGIN,
            (None, None) if d.outcome == Outcome::Rejected => by::POLICY,
            (None, None) => by::NOBODY,
        };
        if let Some((_, counter)) = self
            .question_counters
            .iter()
            .find(|((outcome, b), _)| *outcome == d.outcome && *b == by)
        {
            counter.inc();
        }
        let seconds = d.took.as_secs_f64();
        self.decision_seconds.observe(seconds);
        if by == by::PLUGIN
            && let Some(plugin) = d.answerer
        {
            self.plugin_histogram(plugin).observe(seconds);
        }
        if let Some(f) = d.failure {
            self.plugin_failures
                .get_or_create(&FailureLabels {
                    plugin: f.plugin.clone().unwrap_or_else(|| "host".to_owned()),
                    kind: f.kind.to_string(),
                })
                .inc();
        }
        if let Some(rule) = d.rule {
            let effect = if d.outcome == Outcome::AllowedOnce {
                "allow"
            } else {
                "reject"
            };
            self.rule_counter(rule, effect).inc();
        }
    }
}

/// A rule counter's key, looked up by borrowed parts.
trait RuleKey {
    fn parts(&self) -> (&str, &str);
}

impl RuleKey for (String, &'static str) {
    fn parts(&self) -> (&str, &str) {
        (&self.0, self.1)
    }
}

impl RuleKey for (&str, &'static str) {
    fn parts(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> std::borrow::Borrow<dyn RuleKey + 'a> for (String, &'static str) {
    fn borrow(&self) -> &(dyn RuleKey + 'a) {
        self
    }
}

impl PartialEq for dyn RuleKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn RuleKey + '_ {}

impl std::hash::Hash for dyn RuleKey + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

impl Metrics {
    /// Every metric, registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let questions = Family::<QuestionLabels, Counter>::default();
        registry.register(
            "approval_questions",
            "Questions settled, by outcome and by who decided",
            questions.clone(),
        );
        let decision_seconds = histogram();
        registry.register(
            "approval_decision_seconds",
            "From a request's start to its durable decision",
            decision_seconds.clone(),
        );
        let plugin_seconds =
            Family::<PluginLabels, Histogram>::new_with_constructor(histogram as fn() -> Histogram);
        registry.register(
            "approval_plugin_decision_seconds",
            "Decision time of the questions each plugin decided",
            plugin_seconds.clone(),
        );
        let plugin_failures = Family::<FailureLabels, Counter>::default();
        registry.register(
            "approval_plugin_failures",
            "Questions settled unavailable because a plugin failed, by kind (trap, timeout, memory, invalid-result, quarantined, ...)",
            plugin_failures.clone(),
        );
        let rule_hits = Family::<RuleLabels, Counter>::default();
        registry.register(
            "approval_rule_hits",
            "Questions a standing rule decided, by rule id and effect",
            rule_hits.clone(),
        );
        let shadow_answers = Family::<ShadowLabels, Gauge>::default();
        registry.register(
            "approval_shadow_answers",
            "Shadow plugins' answers since their version loaded: agreed, disagreed, failed, dropped",
            shadow_answers.clone(),
        );
        let plugins = Family::<StateLabels, Gauge>::default();
        registry.register(
            "approval_plugins",
            "Plugins of the deployment by state (loaded, failed, quarantined)",
            plugins.clone(),
        );
        let waiting = Gauge::default();
        registry.register(
            "approval_questions_waiting",
            "Questions waiting for a person on the web console",
            waiting.clone(),
        );
        let waiting_oldest = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "approval_questions_waiting_oldest_seconds",
            "How long the question that has waited longest for a person has waited (0 when none waits)",
            waiting_oldest.clone(),
        );
        let connections = Family::<TransportLabels, Gauge>::default();
        registry.register(
            "approval_connections_open",
            "Connections open, by transport (unix, tcp, console, metrics; stdio is one and is not counted)",
            connections.clone(),
        );
        let connections_by_role = Family::<RoleLabels, Gauge>::default();
        registry.register(
            "approval_clients_open",
            "JSON-RPC connections open, by the roles of their tokens (agent, answerer, admin; one holding several counts under each), local (no token needed) and unauthenticated (not yet)",
            connections_by_role.clone(),
        );
        let sessions = Family::<TransportLabels, Gauge>::default();
        registry.register(
            "approval_sessions_open",
            "Sessions open in this host, by how they came: stdio, unix, tcp (a client opened it), other (a hook's question in flight, in process)",
            sessions.clone(),
        );
        let refused = Family::<RefusedLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "approval_refused",
            "What the limits refused since the host started, by reason",
            refused.clone(),
        );
        registry.register(
            "approval_store_commit_latency_seconds",
            "The commit threads' rounds (one write and sync of a log's batch) by latency, since the process started",
            CommitLatency,
        );
        let logs_refused = Counter::default();
        registry.register(
            "approval_logs_refused",
            "Session logs refused when opened: a record that does not parse, is out of sequence or breaks the log's rules (run approval-host log verify)",
            logs_refused.clone(),
        );
        let unasked = Gauge::default();
        registry.register(
            "approval_unasked_calls",
            "Tool calls an agent CLI ran that no question allowed (approval/unasked records in the store's session logs): a guard that stopped gating",
            unasked.clone(),
        );
        let rules_untrusted = Gauge::default();
        registry.register(
            "approval_rules_logs_untrusted",
            "Standing-rules logs whose chain or signatures do not check: their rules are not used",
            rules_untrusted.clone(),
        );
        let traces = Family::<TraceLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "approval_trace_spans",
            "Spans of [telemetry] traces since the host started: exported, or lost to failed exports",
            traces.clone(),
        );
        let traces_dropped = Gauge::default();
        registry.register(
            "approval_traces_dropped",
            "Questions whose trace was dropped because the exporter fell behind",
            traces_dropped.clone(),
        );
        let commits = Counter::default();
        registry.register(
            "approval_store_commits",
            "Commit rounds of session logs (one write and sync of a batch), in this process, since metrics were served",
            commits.clone(),
        );
        let committed_records = Counter::default();
        registry.register(
            "approval_store_committed_records",
            "Records made durable by those rounds (over the rounds: the mean batch size)",
            committed_records.clone(),
        );
        let commit_seconds = Counter::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "approval_store_commit_seconds",
            "Time spent writing and syncing those rounds (over the rounds: the mean commit latency)",
            commit_seconds.clone(),
        );
        let failed_commits = Counter::default();
        registry.register(
            "approval_store_failed_commits",
            "Commit rounds that failed (the log stops until reopened)",
            failed_commits.clone(),
        );
        let leases: [Counter; 5] = Default::default();
        for (counter, (name, help)) in leases.iter().zip([
            (
                "approval_lease_renewals",
                "Session leases renewed on the shared database",
            ),
            (
                "approval_lease_renewal_failures",
                "Lease renewal rounds that failed (the database did not answer)",
            ),
            (
                "approval_leases_lost",
                "Leases found taken by another host at renewal",
            ),
            (
                "approval_takeovers",
                "Sessions this host took over from a host whose lease ran out",
            ),
            (
                "approval_store_retries",
                "Database statements retried after a connection or serialization failure",
            ),
        ]) {
            registry.register(name, help, counter.clone());
        }
        let question_counters = Outcome::ALL
            .iter()
            .flat_map(|&outcome| BY.iter().map(move |&by| ((outcome, by), outcome)))
            .map(|(key, outcome)| {
                let counter = questions
                    .get_or_create(&QuestionLabels {
                        outcome: outcome.as_str().to_owned(),
                        by: key.1.to_owned(),
                    })
                    .clone();
                (key, counter)
            })
            .collect();
        Metrics {
            registry,
            question_counters,
            leases,
            seen_leases: Mutex::new(crate::audit::stats::leases()),
            commits,
            committed_records,
            commit_seconds,
            failed_commits,
            seen_commits: Mutex::new(crate::audit::stats::commits()),
            decision_seconds,
            plugin_seconds,
            plugin_failures,
            rule_hits,
            shadow_answers,
            plugins,
            waiting,
            waiting_oldest,
            connections,
            connections_by_role,
            sessions,
            refused,
            traces,
            traces_dropped,
            logs_refused,
            unasked,
            summaries: Arc::default(),
            seen_logs_refused: std::sync::atomic::AtomicU64::new(
                crate::audit::stats::logs_refused(),
            ),
            rules_untrusted,
            rule_cache: std::sync::RwLock::default(),
            plugin_cache: std::sync::RwLock::default(),
        }
    }

    fn rule_counter(&self, rule: &str, effect: &'static str) -> Counter {
        if let Some(c) = self
            .rule_cache
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(rule, effect) as &dyn RuleKey)
        {
            return c.clone();
        }
        let counter = self
            .rule_hits
            .get_or_create(&RuleLabels {
                rule: rule.to_owned(),
                effect: effect.to_owned(),
            })
            .clone();
        self.rule_cache
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert((rule.to_owned(), effect), counter.clone());
        counter
    }

    fn plugin_histogram(&self, plugin: &str) -> Histogram {
        if let Some(h) = self
            .plugin_cache
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(plugin)
        {
            return h.clone();
        }
        let histogram = self
            .plugin_seconds
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .clone();
        self.plugin_cache
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(plugin.to_owned(), histogram.clone());
        histogram
    }

    /// The text Prometheus scrapes, with the states read from `server` now.
    pub async fn scrape(&self, server: &Server) -> String {
        let mut states: HashMap<&'static str, i64> =
            [("loaded", 0), ("failed", 0), ("quarantined", 0)].into();
        for p in server.plugin_status().await {
            *states.entry(p.state.as_str()).or_default() += 1;
        }
        for (state, n) in states {
            self.plugins
                .get_or_create(&StateLabels {
                    state: state.to_owned(),
                })
                .set(n);
        }
        for shadow in server.shadow_status() {
            for (answer, n) in [
                ("agreed", shadow.agreed),
                ("disagreed", shadow.disagreed),
                ("failed", shadow.failed),
                ("dropped", shadow.dropped),
            ] {
                self.shadow_answers
                    .get_or_create(&ShadowLabels {
                        shadow: shadow.name.clone(),
                        answer: answer.to_owned(),
                    })
                    .set(n as i64);
            }
        }
        let waiting = server.web_pending().map(|p| p.list()).unwrap_or_default();
        self.waiting.set(waiting.len() as i64);
        self.waiting_oldest.set(
            waiting
                .iter()
                .map(|q| q.since.elapsed().as_secs_f64())
                .fold(0.0, f64::max),
        );
        for (transport, n) in server.admission().open_by_transport() {
            self.connections
                .get_or_create(&TransportLabels {
                    transport: transport.as_str(),
                })
                .set(n as i64);
        }
        for (role, n) in server.connections_by_role() {
            self.connections_by_role
                .get_or_create(&RoleLabels { role })
                .set(n as i64);
        }
        for (transport, n) in server.sessions_by_transport().await {
            self.sessions
                .get_or_create(&TransportLabels { transport })
                .set(n as i64);
        }
        let c = &server.admission().counters;
        for (why, counter) in [
            ("connections", &c.refused_connections),
            ("late-authentication", &c.late_authentication),
            ("not-reading", &c.not_reading),
            ("requests", &c.refused_requests),
            ("sessions", &c.refused_sessions),
        ] {
            self.refused
                .get_or_create(&RefusedLabels {
                    why: why.to_owned(),
                })
                .set(counter.load(Ordering::Relaxed) as i64);
        }
        {
            let now = crate::audit::stats::commits();
            let mut seen = self.seen_commits.lock().unwrap_or_else(|p| p.into_inner());
            self.commits.inc_by(now.rounds.saturating_sub(seen.rounds));
            self.committed_records
                .inc_by(now.records.saturating_sub(seen.records));
            self.commit_seconds
                .inc_by(now.nanos.saturating_sub(seen.nanos) as f64 / 1e9);
            self.failed_commits
                .inc_by(now.failed.saturating_sub(seen.failed));
            *seen = now;
            let now = crate::audit::stats::leases();
            let mut seen = self.seen_leases.lock().unwrap_or_else(|p| p.into_inner());
            for (counter, (now, before)) in self.leases.iter().zip([
                (now.renewed, seen.renewed),
                (now.renewals_failed, seen.renewals_failed),
                (now.lost, seen.lost),
                (now.takeovers, seen.takeovers),
                (now.retries, seen.retries),
            ]) {
                counter.inc_by(now.saturating_sub(before));
            }
            *seen = now;
        }
        let refused_now = crate::audit::stats::logs_refused();
        let before = self.seen_logs_refused.swap(refused_now, Ordering::Relaxed);
        self.logs_refused.inc_by(refused_now.saturating_sub(before));
        // Read from the store, so an in-process hook's records count too; a log is read again
        // only when it grew.
        let store = server.service().store();
        let summaries = self.summaries.clone();
        // A store that does not answer (a database outage) must not hold the scrape: the last
        // figure stands.
        let read = tokio::task::spawn_blocking(move || summaries.all(&*store));
        match tokio::time::timeout(STORE_PATIENCE, read).await {
            Err(_) => tracing::warn!("the session logs did not answer the metrics in time"),
            Ok(Ok(Ok(all))) => {
                self.unasked
                    .set(all.iter().map(|s| s.unasked as i64).sum::<i64>());
            }
            Ok(Ok(Err(e))) => {
                tracing::warn!(error = %e, "reading the session logs for the metrics failed");
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "reading the session logs for the metrics failed");
            }
        }
        self.rules_untrusted.set(
            server
                .service()
                .rules()
                .map_or(0, |book| book.broken().len() as i64),
        );
        if let Some(telemetry) = server.telemetry() {
            let (exported, failed) = telemetry.exported();
            self.traces_dropped.set(telemetry.dropped() as i64);
            for (result, n) in [("exported", exported), ("failed", failed)] {
                self.traces
                    .get_or_create(&TraceLabels {
                        result: result.to_owned(),
                    })
                    .set(n as i64);
            }
        }
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding the metrics failed");
        }
        out
    }
}
