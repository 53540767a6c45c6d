//! The outcomes of deliveries, gathered and recorded many to a statement:
//! when enough wait, when the oldest has waited a few milliseconds, or when
//! nothing else is running that could add to them. One statement at a
//! time; the deliveries go on meanwhile.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use super::drainer::{Drained, Drainer, MIN_WAIT, count};
use super::store::{self, Attempt, Settled};

/// An outcome waits at most this long for others to share its statement.
const FLUSH_AFTER: Duration = Duration::from_millis(5);

/// A statement running alongside the deliveries.
pub(super) type Pending<T> = Option<Pin<Box<dyn Future<Output = T> + Send>>>;

/// What a record statement was given, and the ids it wrote.
pub(super) struct Recorded {
    batch: Vec<Settled>,
    ids: Result<Vec<i64>, sqlx::Error>,
}

pub(super) struct Recorder<'d> {
    drainer: &'d Drainer,
    /// Outcomes not recorded yet, and when they must be.
    pending: Vec<Settled>,
    flush_at: Option<Instant>,
    recording: Pending<Recorded>,
    /// When the last record statement started.
    last_started: Option<Instant>,
}

impl<'d> Recorder<'d> {
    pub(super) fn new(drainer: &'d Drainer) -> Self {
        Recorder {
            drainer,
            pending: Vec::new(),
            flush_at: None,
            recording: None,
            last_started: None,
        }
    }

    pub(super) fn push(&mut self, settled: Settled) {
        self.pending.push(settled);
        self.flush_at
            .get_or_insert_with(|| Instant::now() + FLUSH_AFTER);
    }

    /// Nothing waits to be recorded, and no statement is running.
    pub(super) fn is_idle(&self) -> bool {
        self.pending.is_empty() && self.recording.is_none()
    }

    pub(super) fn is_recording(&self) -> bool {
        self.recording.is_some()
    }

    /// When the outcomes waiting must be recorded (none while a statement
    /// runs: they go next).
    pub(super) fn flush_at(&self) -> Option<Instant> {
        self.flush_at.filter(|_| self.recording.is_none())
    }

    /// Starts the record statement when it is time: when enough outcomes
    /// wait, when the oldest has waited [`FLUSH_AFTER`], with `stopping`,
    /// and when the drainer is `idle` (nothing else can add outcomes soon)
    /// unless a statement started less than [`FLUSH_AFTER`] ago: under a
    /// steady load the outcomes of several handed batches share one.
    pub(super) fn record_if_due(&mut self, idle: bool, stopping: bool) {
        if self.recording.is_some() || self.pending.is_empty() {
            return;
        }
        let started = Instant::now();
        let waited = self.flush_at.is_some_and(|at| at <= started);
        let now = stopping
            || (idle
                && self
                    .last_started
                    .is_none_or(|last| last + FLUSH_AFTER <= started));
        let enough = self.pending.len()
            >= usize::try_from(self.drainer.settings.batch.max(1)).unwrap_or(usize::MAX);
        if !(now || waited || enough) {
            return;
        }
        self.flush_at = None;
        self.last_started = Some(started);
        let batch = std::mem::take(&mut self.pending);
        let (pool, now) = (self.drainer.pool.clone(), self.drainer.clock.pinned());
        count(&self.drainer.stats.record_statements, 1);
        self.recording = Some(Box::pin(async move {
            let ids = store::record_many(&pool, &batch, now).await;
            Recorded { batch, ids }
        }));
    }

    /// The running statement's result.
    pub(super) async fn next(&mut self) -> Recorded {
        take(&mut self.recording).await
    }

    /// Waits for the running statement, then records what is left.
    pub(super) async fn finish(&mut self, drained: &mut Drained) -> Option<Instant> {
        let mut due = None;
        if self.recording.is_some() {
            let recorded = self.next().await;
            due = self.recorded(recorded, drained);
        }
        self.record_if_due(true, true);
        if self.recording.is_some() {
            let recorded = self.next().await;
            due = earliest(due, self.recorded(recorded, drained));
        }
        due
    }

    /// Counts and logs what a record statement wrote; the earliest a row it
    /// gave back or retried is due again.
    pub(super) fn recorded(&self, recorded: Recorded, drained: &mut Drained) -> Option<Instant> {
        let Recorded { batch, ids } = recorded;
        let written: HashSet<i64> = match ids {
            Ok(ids) => ids.into_iter().collect(),
            Err(error) => {
                crate::db::detection::notice(&error);
                tracing::warn!(
                    error = %error,
                    rows = batch.len(),
                    "could not record outbox outcomes; their leases will expire"
                );
                drained.unrecorded += batch.len();
                return None;
            }
        };
        let (stats, sink) = (&self.drainer.stats, &*self.drainer.route);
        let mut due = None;
        for settled in &batch {
            let (outbox_id, attempt) = (settled.id, settled.attempts);
            let (tally, counter) = match &settled.attempt {
                Attempt::Released => (&mut drained.released, None),
                Attempt::Delivered => (&mut drained.delivered, Some(&stats.delivered)),
                Attempt::Retry { .. } => (&mut drained.retried, Some(&stats.retried)),
                Attempt::Dead { .. } => (&mut drained.dead, Some(&stats.dead)),
            };
            *tally += 1;
            if !written.contains(&settled.id) {
                if counter.is_some() {
                    count(&stats.lost_leases, 1);
                    tracing::warn!(
                        outbox_id,
                        attempt,
                        "lease expired during delivery; the row was taken over"
                    );
                }
                continue;
            }
            due = earliest(due, due_again(&settled.attempt));
            if let Some(counter) = counter {
                count(counter, 1);
            }
            match &settled.attempt {
                Attempt::Released => {}
                Attempt::Delivered => tracing::debug!(outbox_id, attempt, sink, "delivered"),
                Attempt::Retry { after_secs, error } => tracing::warn!(
                    outbox_id, attempt, sink, %error, retry_in_secs = after_secs, "delivery failed"
                ),
                Attempt::Dead { error } => tracing::error!(
                    outbox_id, attempt, sink, %error, "delivery dead-lettered"
                ),
            }
        }
        due
    }
}

/// When a row with this outcome is due again, if it is.
fn due_again(attempt: &Attempt) -> Option<Instant> {
    match attempt {
        Attempt::Released => Some(Instant::now()),
        Attempt::Retry { after_secs, .. } => {
            Some(Instant::now() + Duration::from_secs_f64(after_secs.clamp(0.0, 1e9)).max(MIN_WAIT))
        }
        Attempt::Delivered | Attempt::Dead { .. } => None,
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Awaits a pending statement and clears its slot. Dropped before it ends,
/// the statement stays in its slot, to be awaited again.
pub(super) async fn take<T>(pending: &mut Pending<T>) -> T {
    let output = pending.as_mut().expect("polled only while pending").await;
    *pending = None;
    output
}
