//! `GET /metrics` in the Prometheus text format. Every label is bounded:
//! routes are matched paths, providers are the mounted names (or `unknown`),
//! outcomes and results are fixed sets.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::ingest::batch::BatchStats;
use crate::outbox::store;
use crate::outbox::worker::DrainerStats;
use crate::sweep::schedule::SweepStats;

/// Upper bounds (seconds) of the ingest latency histogram.
const BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Debug, Default)]
struct Registry {
    requests: BTreeMap<(String, u16), u64>,
    events: BTreeMap<(String, &'static str), u64>,
    ingest: BTreeMap<String, Histogram>,
}

/// The counters of this process's background tasks, when it runs them.
#[derive(Debug, Default, Clone)]
pub struct WorkerStats {
    /// The outbox drainer's.
    pub deliveries: Option<Arc<DrainerStats>>,
    /// The periodic sweep's.
    pub sweeps: Option<Arc<SweepStats>>,
}

/// The process's counters. Cheap to share.
#[derive(Debug, Default)]
pub struct Metrics {
    registry: Mutex<Registry>,
    deliveries: Option<Arc<DrainerStats>>,
    sweeps: Option<Arc<SweepStats>>,
}

impl Metrics {
    pub fn new(workers: WorkerStats) -> Self {
        Metrics {
            registry: Mutex::default(),
            deliveries: workers.deliveries,
            sweeps: workers.sweeps,
        }
    }

    /// The sweep's counters (this process's runs) and each provider's last
    /// successful sweep (any process's, from the `sweeps` table).
    fn render_sweeps(&self, out: &mut String, last_successes: &[(String, i64)]) {
        if let Some(stats) = &self.sweeps {
            out.push_str("# HELP webhookd_sweep_runs_total Periodic sweeps run by this process, by result.\n");
            out.push_str("# TYPE webhookd_sweep_runs_total counter\n");
            for (provider, counters) in &stats.providers {
                for (result, counter) in
                    [("ok", &counters.runs_ok), ("failed", &counters.runs_failed)]
                {
                    let n = counter.load(Ordering::Relaxed);
                    let _ = writeln!(
                        out,
                        "webhookd_sweep_runs_total{{provider=\"{provider}\",result=\"{result}\"}} {n}"
                    );
                }
            }
            out.push_str("# HELP webhookd_sweep_events_total Events the sweeps of this process listed, by result.\n");
            out.push_str("# TYPE webhookd_sweep_events_total counter\n");
            for (provider, counters) in &stats.providers {
                for (result, counter) in [
                    ("recovered", &counters.recovered),
                    ("already_seen", &counters.already_seen),
                    ("skipped", &counters.skipped),
                ] {
                    let n = counter.load(Ordering::Relaxed);
                    let _ = writeln!(
                        out,
                        "webhookd_sweep_events_total{{provider=\"{provider}\",result=\"{result}\"}} {n}"
                    );
                }
            }
        }
        if !last_successes.is_empty() {
            out.push_str("# HELP webhookd_sweep_last_success_timestamp_seconds When a sweep of the provider last succeeded.\n");
            out.push_str("# TYPE webhookd_sweep_last_success_timestamp_seconds gauge\n");
            for (provider, at) in last_successes {
                let _ = writeln!(
                    out,
                    "webhookd_sweep_last_success_timestamp_seconds{{provider=\"{provider}\"}} {at}"
                );
            }
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        // A panic elsewhere while holding the lock leaves counts usable.
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn request(&self, route: &str, status: u16) {
        *self
            .registry()
            .requests
            .entry((route.to_owned(), status))
            .or_default() += 1;
    }

    /// One webhook's fate: an [`crate::effects::Outcome`] or a refusal label.
    pub fn event(&self, provider: &str, outcome: &'static str) {
        *self
            .registry()
            .events
            .entry((provider.to_owned(), outcome))
            .or_default() += 1;
    }

    pub fn ingest_latency(&self, provider: &str, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let mut registry = self.registry();
        let histogram = registry.ingest.entry(provider.to_owned()).or_default();
        for (bound, count) in BUCKETS.iter().zip(histogram.counts.iter_mut()) {
            if secs <= *bound {
                *count += 1;
            }
        }
        histogram.count += 1;
        histogram.sum += secs;
    }

    /// The text exposition, with the outbox gauges when they could be read.
    pub fn render(&self, depth: Option<store::Depth>, batches: &BatchStats) -> String {
        let registry = self.registry();
        let mut out = String::new();
        out.push_str(
            "# HELP webhookd_http_requests_total HTTP requests by matched route and status.\n",
        );
        out.push_str("# TYPE webhookd_http_requests_total counter\n");
        for ((route, status), n) in &registry.requests {
            let _ = writeln!(
                out,
                "webhookd_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP webhookd_events_total Webhook deliveries by provider and outcome.\n");
        out.push_str("# TYPE webhookd_events_total counter\n");
        for ((provider, outcome), n) in &registry.events {
            let _ = writeln!(
                out,
                "webhookd_events_total{{provider=\"{provider}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP webhookd_ingest_duration_seconds Time to verify and apply one delivery.\n",
        );
        out.push_str("# TYPE webhookd_ingest_duration_seconds histogram\n");
        for (provider, h) in &registry.ingest {
            for (bound, count) in BUCKETS.iter().zip(h.counts.iter()) {
                let _ = writeln!(
                    out,
                    "webhookd_ingest_duration_seconds_bucket{{provider=\"{provider}\",le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "webhookd_ingest_duration_seconds_bucket{{provider=\"{provider}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "webhookd_ingest_duration_seconds_sum{{provider=\"{provider}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "webhookd_ingest_duration_seconds_count{{provider=\"{provider}\"}} {}",
                h.count
            );
        }
        for (name, help, counter) in [
            (
                "webhookd_ingest_batches_total",
                "Batches of events committed together (group commit).",
                &batches.batches,
            ),
            (
                "webhookd_ingest_batched_events_total",
                "Events carried by those batches.",
                &batches.events,
            ),
            (
                "webhookd_ingest_batch_fallbacks_total",
                "Batches that failed and were applied one event at a time.",
                &batches.fallbacks,
            ),
        ] {
            single(
                &mut out,
                name,
                "counter",
                help,
                counter.load(Ordering::Relaxed),
            );
        }
        if let Some(stats) = &self.deliveries {
            out.push_str("# HELP webhookd_outbox_deliveries_total Outbox delivery attempts by result (this process).\n");
            out.push_str("# TYPE webhookd_outbox_deliveries_total counter\n");
            for (result, counter) in [
                ("delivered", &stats.delivered),
                ("retried", &stats.retried),
                ("dead", &stats.dead),
                ("lost_lease", &stats.lost_leases),
            ] {
                let n = counter.load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "webhookd_outbox_deliveries_total{{result=\"{result}\"}} {n}"
                );
            }
            render_drainer(&mut out, stats);
        }
        if let Some(depth) = depth {
            for (name, help, value) in [
                (
                    "webhookd_outbox_depth",
                    "Outbox rows waiting for delivery.",
                    depth.pending as f64,
                ),
                (
                    "webhookd_outbox_oldest_pending_age_seconds",
                    "Age of the oldest row waiting for delivery.",
                    depth.oldest_pending_secs,
                ),
                (
                    "webhookd_outbox_dead",
                    "Dead-lettered outbox rows.",
                    depth.dead as f64,
                ),
            ] {
                let _ = writeln!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
                );
            }
        }
        single(
            &mut out,
            "webhookd_log_lines_dropped_total",
            "counter",
            "Log lines dropped because the log output was closed or did not keep up.",
            crate::telemetry::log_lines_dropped(),
        );
        out
    }
}

/// `GET /metrics`. The outbox gauges are read from the database with a short
/// timeout; without it they are left out rather than failing the scrape.
pub async fn metrics(State(state): State<AppState>) -> Response {
    let depth = tokio::time::timeout(Duration::from_secs(2), store::depth(&state.pool))
        .await
        .ok()
        .and_then(Result::ok);
    let swept = tokio::time::timeout(
        Duration::from_secs(2),
        crate::sweep::store::last_successes(&state.pool),
    )
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or_default();
    let mut body = state.metrics.render(depth, state.ingestor.batch_stats());
    state.metrics.render_sweeps(&mut body, &swept);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// Counts every routed request by matched path and status.
pub async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    state.metrics.request(&route, response.status().as_u16());
    response
}

/// The drainer's statements and memory (this process).
fn render_drainer(out: &mut String, stats: &DrainerStats) {
    for (name, kind, help, counter) in [
        (
            "webhookd_outbox_abandoned_total",
            "counter",
            "Rows dead-lettered at lease: their last attempt never reported back.",
            &stats.abandoned,
        ),
        (
            "webhookd_outbox_lease_statements_total",
            "counter",
            "Lease statements the drainer ran.",
            &stats.lease_statements,
        ),
        (
            "webhookd_outbox_record_statements_total",
            "counter",
            "Statements that recorded delivery outcomes, each of many rows.",
            &stats.record_statements,
        ),
        (
            "webhookd_outbox_held_bytes",
            "gauge",
            "Payload bytes leased and not yet settled.",
            &stats.held_bytes,
        ),
        (
            "webhookd_outbox_peak_held_bytes",
            "gauge",
            "The most payload bytes held at once since start.",
            &stats.peak_held_bytes,
        ),
    ] {
        single(out, name, kind, help, counter.load(Ordering::Relaxed));
    }
}

/// One unlabelled metric with its help and type.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}
