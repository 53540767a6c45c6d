//! `GET /metrics` in the Prometheus text format, rendered by
//! `metrics-exporter-prometheus` from a recorder that this application owns:
//! never the process-wide one, so applications side by side in one process
//! (the API tests) count apart.
//!
//! Every label is bounded: routes are matched paths (or `unmatched`),
//! providers are the mounted names, outcomes and results are fixed sets.
//!
//! The domain keeps its own counters (the batches', the drainer's, the
//! sweep's: atomics that know nothing of this layer); each scrape copies
//! them into the recorder. What is read from the database at the scrape
//! ([`Scraped`]) goes into a recorder of that scrape's own, so a failed read
//! leaves its gauges out rather than showing their last values.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics::{Counter, Gauge, Histogram, Key, Label, Recorder};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};

use super::AppState;
use crate::ingest::BatchStats;
use crate::outbox::worker::DrainerStats;
use crate::sweep::SweepStats;
use quantile::Buckets;

mod catalogue;
mod console;
#[cfg(test)]
mod deployed;
pub mod quantile;
mod scraped;
mod secrets;
mod versions;

pub use scraped::Scraped;
pub use versions::VersionCount;

use catalogue::*;

/// Histogram samples wait in the recorder until a render or an upkeep folds
/// them in: one upkeep every this many requests bounds them in a process
/// that nobody scrapes.
const UPKEEP_EVERY: u64 = 1024;

/// The counters of this process's background tasks, when it runs them.
#[derive(Debug, Default, Clone)]
pub struct WorkerStats {
    /// The outbox drainers', by the name of the sink each drains.
    pub deliveries: Vec<(String, Arc<DrainerStats>)>,
    /// The periodic sweep's.
    pub sweeps: Option<Arc<SweepStats>>,
}

/// The process's counters, in a recorder of their own. Cheap to share.
#[derive(Debug)]
pub struct Metrics {
    recorder: PrometheusRecorder,
    /// Requests counted, for the upkeep.
    requests: AtomicU64,
    deliveries: Vec<(String, Arc<DrainerStats>)>,
    sweeps: Option<Arc<SweepStats>>,
    /// The ingest latency histogram again, every provider together, for
    /// the console's quantiles (the recorder keeps its own only as text).
    latency: Buckets,
    /// The API versions counted, again, for the console.
    versions: versions::Versions,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(WorkerStats::default())
    }
}

impl Metrics {
    pub fn new(workers: WorkerStats) -> Self {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(INGEST_DURATION.into()), &LATENCY_BUCKETS)
            .and_then(|b| {
                b.set_buckets_for_metric(Matcher::Full(BATCH_SIZE.into()), &BATCH_SIZE_BUCKETS)
            })
            .expect("the buckets are not empty")
            .build_recorder();
        describe(&recorder);
        Metrics {
            recorder,
            requests: AtomicU64::new(0),
            deliveries: workers.deliveries,
            sweeps: workers.sweeps,
            latency: Buckets::new(&LATENCY_BUCKETS),
            versions: versions::Versions::default(),
        }
    }

    fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        self.recorder
            .register_counter(&Key::from_parts(name, labels), &METADATA)
    }

    fn gauge(&self, name: &'static str, labels: Vec<Label>) -> Gauge {
        gauge(&self.recorder, name, labels)
    }

    pub fn request(&self, route: &str, status: u16) {
        let labels = vec![
            Label::new("route", route.to_owned()),
            Label::new("status", status.to_string()),
        ];
        self.counter(REQUESTS, labels).increment(1);
        if self.requests.fetch_add(1, Ordering::Relaxed) % UPKEEP_EVERY == UPKEEP_EVERY - 1 {
            self.recorder.handle().run_upkeep();
        }
    }

    /// One webhook's fate: an [`crate::events::Outcome`] or a refusal label.
    pub fn event(&self, provider: &str, outcome: &'static str) {
        let labels = vec![
            Label::new("provider", provider.to_owned()),
            Label::from_static_parts("outcome", outcome),
        ];
        self.counter(EVENTS, labels).increment(1);
    }

    pub fn ingest_latency(&self, provider: &str, elapsed: Duration) {
        let key = Key::from_parts(
            INGEST_DURATION,
            vec![Label::new("provider", provider.to_owned())],
        );
        self.recorder
            .register_histogram(&key, &METADATA)
            .record(elapsed.as_secs_f64());
        self.latency.record(elapsed.as_secs_f64());
    }

    /// Every delivery's ingest latency since start (seconds).
    pub fn ingest_latencies(&self) -> &Buckets {
        &self.latency
    }

    /// Where the group commit records each batch's events
    /// (`webhookd_ingest_batch_size`).
    pub fn batch_sizes(&self) -> Histogram {
        self.recorder
            .register_histogram(&Key::from_static_name(BATCH_SIZE), &METADATA)
    }

    /// The text exposition: this process's counters, then what the scrape
    /// read from the database.
    pub fn render(&self, scraped: &Scraped, batches: &BatchStats) -> String {
        self.collect(batches);
        let mut out = self.recorder.handle().render();
        out.push_str(&scraped.render());
        out
    }

    /// Copies the domain's counters into the recorder.
    fn collect(&self, batches: &BatchStats) {
        for (name, counter) in [
            (BATCHES, &batches.batches),
            (BATCHED_EVENTS, &batches.events),
            (BATCH_FALLBACKS, &batches.fallbacks),
        ] {
            self.counter(name, Vec::new())
                .absolute(counter.load(Ordering::Relaxed));
        }
        self.counter(LOG_LINES_DROPPED, Vec::new())
            .absolute(crate::telemetry::log_lines_dropped());
        for (sink, stats) in &self.deliveries {
            self.collect_drainer(sink, stats);
        }
        if let Some(stats) = &self.sweeps {
            self.collect_sweeps(stats);
        }
    }

    /// A drainer's attempts, statements and memory (this process), labelled
    /// with the name of its sink.
    fn collect_drainer(&self, sink: &str, stats: &DrainerStats) {
        let sink = || Label::new("sink", sink.to_owned());
        for (result, counter) in [
            ("delivered", &stats.delivered),
            ("retried", &stats.retried),
            ("dead", &stats.dead),
            ("lost_lease", &stats.lost_leases),
        ] {
            self.counter(
                DELIVERIES,
                vec![Label::from_static_parts("result", result), sink()],
            )
            .absolute(counter.load(Ordering::Relaxed));
        }
        for (name, counter) in [
            (ABANDONED, &stats.abandoned),
            (LEASE_STATEMENTS, &stats.lease_statements),
            (RECORD_STATEMENTS, &stats.record_statements),
        ] {
            self.counter(name, vec![sink()])
                .absolute(counter.load(Ordering::Relaxed));
        }
        for (name, bytes) in [
            (HELD_BYTES, &stats.held_bytes),
            (PEAK_HELD_BYTES, &stats.peak_held_bytes),
        ] {
            self.gauge(name, vec![sink()])
                .set(bytes.load(Ordering::Relaxed) as f64);
        }
    }

    /// The sweeps' runs and listed events (this process), by provider.
    fn collect_sweeps(&self, stats: &SweepStats) {
        for (provider, counters) in &stats.providers {
            let labels = |result| {
                vec![
                    Label::new("provider", provider.clone()),
                    Label::from_static_parts("result", result),
                ]
            };
            for (result, counter) in [("ok", &counters.runs_ok), ("failed", &counters.runs_failed)]
            {
                self.counter(SWEEP_RUNS, labels(result))
                    .absolute(counter.load(Ordering::Relaxed));
            }
            for (result, counter) in [
                ("recovered", &counters.recovered),
                ("ignored", &counters.ignored),
                ("deferred", &counters.deferred),
                ("already_seen", &counters.already_seen),
                ("skipped", &counters.skipped),
            ] {
                self.counter(SWEEP_EVENTS, labels(result))
                    .absolute(counter.load(Ordering::Relaxed));
            }
        }
    }
}

fn gauge(recorder: &PrometheusRecorder, name: &'static str, labels: Vec<Label>) -> Gauge {
    recorder.register_gauge(&Key::from_parts(name, labels), &METADATA)
}

/// `GET /metrics`. The database's gauges are read with a short timeout
/// each ([`Scraped::read`]); without an answer they are left out rather
/// than failing the scrape.
pub async fn metrics(State(state): State<AppState>) -> Response {
    let (mut scraped, unready) =
        tokio::join!(Scraped::read(&state.pool), super::health::unready(&state));
    scraped.ready = Some(unready.is_none());
    let body = state.metrics.render(&scraped, state.ingestor.batch_stats());
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
