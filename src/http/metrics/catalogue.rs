//! What `/metrics` exposes: every metric's name and HELP text by kind,
//! the histograms' buckets, and the description a recorder is given of
//! them.

use metrics::{KeyName, Metadata, Recorder, SharedString};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::{console, secrets, versions};

pub(super) const REQUESTS: &str = "webhookd_http_requests_total";
pub(super) const EVENTS: &str = "webhookd_events_total";
pub(super) const INGEST_DURATION: &str = "webhookd_ingest_duration_seconds";
pub(super) const BATCHES: &str = "webhookd_ingest_batches_total";
pub(super) const BATCHED_EVENTS: &str = "webhookd_ingest_batched_events_total";
pub(super) const BATCH_FALLBACKS: &str = "webhookd_ingest_batch_fallbacks_total";
pub(super) const BATCH_SIZE: &str = "webhookd_ingest_batch_size";
pub(super) const DELIVERIES: &str = "webhookd_outbox_deliveries_total";
pub(super) const ABANDONED: &str = "webhookd_outbox_abandoned_total";
pub(super) const LEASE_STATEMENTS: &str = "webhookd_outbox_lease_statements_total";
pub(super) const RECORD_STATEMENTS: &str = "webhookd_outbox_record_statements_total";
pub(super) const HELD_BYTES: &str = "webhookd_outbox_held_bytes";
pub(super) const PEAK_HELD_BYTES: &str = "webhookd_outbox_peak_held_bytes";
pub(super) const OUTBOX_DEPTH: &str = "webhookd_outbox_depth";
pub(super) const OLDEST_PENDING: &str = "webhookd_outbox_oldest_pending_age_seconds";
pub(super) const OUTBOX_DEAD: &str = "webhookd_outbox_dead";
pub(super) const LOG_LINES_DROPPED: &str = "webhookd_log_lines_dropped_total";
pub(super) const SWEEP_RUNS: &str = "webhookd_sweep_runs_total";
pub(super) const SWEEP_EVENTS: &str = "webhookd_sweep_events_total";
pub(super) const SWEEP_LAST_SUCCESS: &str = "webhookd_sweep_last_success_timestamp_seconds";
pub(super) const DEFERRED_DEPTH: &str = "webhookd_deferred_depth";
pub(super) const DEFERRED_OLDEST: &str = "webhookd_deferred_oldest_age_seconds";
pub(super) const OWNER_WAITS: &str = "webhookd_owner_waits";
pub(super) const OWNER_WAIT_OLDEST: &str = "webhookd_owner_wait_oldest_age_seconds";
pub(super) const OWNERS_LEARNED: &str = "webhookd_owners_learned";
pub(super) const OWNER_CONFLICTS: &str = "webhookd_owner_conflicts";
pub(super) const SOURCE_LAST_EVENT: &str = "webhookd_source_last_event_timestamp_seconds";
pub(super) const SOURCE_USUAL_GAP: &str = "webhookd_source_usual_gap_seconds";
pub(super) const READY: &str = "webhookd_ready";

/// Upper bounds (seconds) of the ingest latency histogram.
pub(super) const LATENCY_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Upper bounds (events) of the batch size histogram.
pub(super) const BATCH_SIZE_BUCKETS: [f64; 9] =
    [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// The HELP text of every metric, by kind and name.
pub(super) const COUNTERS: [(&str, &str); 15] = [
    (REQUESTS, "HTTP requests by matched route and status."),
    (versions::API_VERSIONS, versions::API_VERSIONS_HELP),
    (console::THROTTLED, console::THROTTLED_HELP),
    (EVENTS, "Webhook deliveries by provider and outcome."),
    (secrets::MATCHED, secrets::MATCHED_HELP),
    (
        BATCHES,
        "Batches of events committed together (group commit).",
    ),
    (BATCHED_EVENTS, "Events carried by those batches."),
    (
        BATCH_FALLBACKS,
        "Batches that failed and were applied one event at a time.",
    ),
    (
        DELIVERIES,
        "Outbox delivery attempts by result (this process).",
    ),
    (
        ABANDONED,
        "Rows dead-lettered at lease: their last attempt never reported back.",
    ),
    (LEASE_STATEMENTS, "Lease statements the drainer ran."),
    (
        RECORD_STATEMENTS,
        "Statements that recorded delivery outcomes, each of many rows.",
    ),
    (
        LOG_LINES_DROPPED,
        "Log lines dropped because the log output was closed or did not keep up.",
    ),
    (
        SWEEP_RUNS,
        "Periodic sweeps run by this process, by result.",
    ),
    (
        SWEEP_EVENTS,
        "Events the sweeps of this process listed, by result.",
    ),
];
pub(super) const GAUGES: [(&str, &str); 15] = [
    (HELD_BYTES, "Payload bytes leased and not yet settled."),
    (
        PEAK_HELD_BYTES,
        "The most payload bytes held at once since start.",
    ),
    (OUTBOX_DEPTH, "Outbox rows waiting for delivery."),
    (
        OLDEST_PENDING,
        "Age of the oldest row waiting for delivery.",
    ),
    (OUTBOX_DEAD, "Dead-lettered outbox rows."),
    (
        SWEEP_LAST_SUCCESS,
        "When a sweep of the provider last succeeded.",
    ),
    (DEFERRED_DEPTH, "Events waiting for a dependency."),
    (
        DEFERRED_OLDEST,
        "How long the oldest event waiting for a dependency has waited.",
    ),
    (
        OWNER_WAITS,
        "Payments waiting for their owner to be learned (deferred events whose waits_for is owner:…).",
    ),
    (
        OWNER_WAIT_OLDEST,
        "How long the oldest payment waiting for its owner has waited; past WEBHOOKD_OWNER_WAIT it is rejected as no owner.",
    ),
    (
        OWNERS_LEARNED,
        "Owners learned for the providers' customers and payments.",
    ),
    (
        OWNER_CONFLICTS,
        "Claims of another owner for a customer or payment whose owner was learned before (the first stays): their sum.",
    ),
    (
        SOURCE_LAST_EVENT,
        "When the source's last verified delivery arrived, at any process (written every 30 s at most).",
    ),
    (
        SOURCE_USUAL_GAP,
        "The longest silence between the source's deliveries in the 14 days before its last, from one hour's last delivery to the next hour's first (3600 at least).",
    ),
    (
        READY,
        "1 when /readyz would answer 200 (database reachable, migrations applied, not stopping), else 0.",
    ),
];
pub(super) const HISTOGRAMS: [(&str, &str); 2] = [
    (INGEST_DURATION, "Time to verify and apply one delivery."),
    (BATCH_SIZE, "Events carried by each batch (group commit)."),
];

/// What the recorder is told of where a metric comes from (it ignores it).
pub(super) const METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

pub(super) fn describe(recorder: &PrometheusRecorder) {
    let text = |(name, help)| (KeyName::from_const_str(name), SharedString::const_str(help));
    for (name, help) in COUNTERS.map(text) {
        recorder.describe_counter(name, None, help);
    }
    for (name, help) in GAUGES.map(text) {
        recorder.describe_gauge(name, None, help);
    }
    for (name, help) in HISTOGRAMS.map(text) {
        recorder.describe_histogram(name, None, help);
    }
}
