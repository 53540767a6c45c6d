//! One drainer's flow of rows: leased (by count and by bytes) into a local
//! queue, started as slots free up (at most `concurrency` in flight, each a
//! task of its own), their outcomes gathered and recorded many to a
//! statement. Leases and records run alongside the deliveries, so a slow row
//! holds one slot and nothing else waits for it. Running continuously, it
//! also takes the rows this process's ingest leased to it at insert
//! ([`super::handoff`]), within the same byte budget, without a lease.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::{Id, JoinError, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

use super::drainer::{Drained, Drainer, MIN_WAIT, backoff, count};
use super::recorder::{Pending, Recorder, take};
use super::store::{self, Attempt, Budget, Lease, Leased, Settled};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// One lease, its rows settled: [`Drainer::drain_once`].
    Once,
    /// Until the drainer is stopping: [`Drainer::run`].
    Continuous,
}

/// When the next lease may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// As soon as the queue is empty and a slot is free.
    Open,
    /// Once a delivery frees bytes: the byte budget stopped the last lease.
    Full,
    /// Nothing more was due: on a wake, or at the time given (the next
    /// row's `available_at`, or the poll).
    Idle(Instant),
    /// The last lease failed: at the time given.
    Backoff(Instant),
    /// Leased once already ([`Mode::Once`]).
    Closed,
}

/// A leased row not started yet.
struct Queued {
    leased: Leased,
    /// Unix seconds, by the drainer's clock.
    leased_at: i64,
    bytes: u64,
}

/// What the lease statement was asked, and what it answered.
struct LeaseResult {
    budget: Budget,
    leased_at: i64,
    lease: Result<Lease, sqlx::Error>,
}

pub(super) struct Pipeline<'d> {
    drainer: &'d Drainer,
    mode: Mode,
    gate: Gate,
    queue: VecDeque<Queued>,
    deliveries: JoinSet<Settled>,
    /// The payload bytes of each delivery in flight.
    in_flight: HashMap<Id, u64>,
    leasing: Pending<LeaseResult>,
    recorder: Recorder<'d>,
    /// Payload bytes of the rows queued and in flight.
    held_bytes: u64,
    /// The earliest a row this pipeline gave back or retried is due again,
    /// since the last lease started.
    retry_at: Option<Instant>,
    failures: u32,
    drained: Drained,
}

impl<'d> Pipeline<'d> {
    pub(super) fn new(drainer: &'d Drainer, mode: Mode) -> Self {
        Pipeline {
            drainer,
            mode,
            gate: Gate::Open,
            queue: VecDeque::new(),
            deliveries: JoinSet::new(),
            in_flight: HashMap::new(),
            leasing: None,
            recorder: Recorder::new(drainer),
            held_bytes: 0,
            retry_at: None,
            failures: 0,
            drained: Drained::default(),
        }
    }

    /// Runs until the work of the mode is done: for [`Mode::Continuous`],
    /// until the drainer is stopping and the deliveries in flight finished,
    /// or `grace` after it started stopping (their leases then expire).
    pub(super) async fn run(mut self, grace: Duration) -> Result<Drained, sqlx::Error> {
        let stopping = self.drainer.stopping.clone();
        let mut hard_stop = None;
        let handed = self.mode == Mode::Continuous;
        if handed {
            let settings = &self.drainer.settings;
            let lease = (!settings.ordered).then_some(settings.lease.as_secs_f64());
            self.drainer.waker.accept(lease, settings.batch_bytes);
        }
        loop {
            if stopping.is_cancelled() {
                if handed && hard_stop.is_none() {
                    self.drainer.waker.accept(None, 0);
                }
                hard_stop.get_or_insert_with(|| deadline(grace));
                if handed {
                    self.take_handed(true);
                }
                while let Some(queued) = self.queue.pop_front() {
                    self.release(queued);
                }
            } else if handed {
                self.take_handed(false);
            }
            self.start_deliveries();
            // A wake that asked for a lease while one ran is kept until the
            // gate is idle: that lease may have read the table too early.
            if matches!(self.gate, Gate::Idle(_)) && self.drainer.waker.lease_wanted() {
                self.gate = Gate::Open;
            }
            self.lease_if_wanted(stopping.is_cancelled());
            let idle = self.deliveries.is_empty() && self.queue.is_empty();
            self.recorder.record_if_due(idle, stopping.is_cancelled());
            if self.done(stopping.is_cancelled()) {
                break;
            }
            let wake = self.drainer.waker.woken();
            let flush_at = self.recorder.flush_at();
            let lease_at = match self.gate {
                Gate::Idle(at) | Gate::Backoff(at) => Some(at),
                _ => None,
            };
            tokio::select! {
                Some(joined) = self.deliveries.join_next_with_id(), if !self.deliveries.is_empty() => {
                    self.finished(joined);
                }
                result = take(&mut self.leasing), if self.leasing.is_some() => self.leased(result)?,
                recorded = self.recorder.next(), if self.recorder.is_recording() => {
                    let due = self.recorder.recorded(recorded, &mut self.drained);
                    self.due_again(due);
                }
                () = sleep_until(flush_at) => {}
                // Handed rows, or a lease asked for: looked at above.
                () = wake => {}
                () = sleep_until(lease_at) => self.gate = Gate::Open,
                () = stopping.cancelled(), if !stopping.is_cancelled() => {}
                () = sleep_until(hard_stop) => break,
            }
        }
        self.stop().await;
        Ok(self.drained)
    }

    /// Queues the rows handed to this drainer, within the rows and bytes
    /// left of its budget, and gives back what it cannot hold; with
    /// `all`, gives back everything (stopping).
    fn take_handed(&mut self, all: bool) {
        let waker = &self.drainer.waker;
        if !waker.has_handed() {
            return;
        }
        let settings = &self.drainer.settings;
        let held = self.queue.len() + self.deliveries.len();
        let taken = if all {
            waker.take(usize::MAX, u64::MAX, true)
        } else {
            let rows = usize::try_from(settings.batch).unwrap_or(usize::MAX);
            let bytes = settings.batch_bytes.saturating_sub(self.held_bytes);
            waker.take(rows.saturating_sub(held), bytes, held == 0)
        };
        let now = self.drainer.clock.now();
        let given_back = taken.given_back.into_iter().chain(
            (all.then_some(taken.rows.iter()).into_iter().flatten())
                .map(|row| (row.message.id, row.message.attempts)),
        );
        for (id, attempts) in given_back.collect::<Vec<_>>() {
            self.recorder.push(Settled {
                id,
                attempts,
                attempt: Attempt::Released,
            });
        }
        if all {
            return;
        }
        for row in taken.rows {
            let bytes = row.message.payload.len() as u64;
            // Its lease started at its insert (rounded to the earlier second).
            let waited = row.at.elapsed().as_secs_f64().ceil() as i64;
            self.drained.leased += 1;
            self.queue.push_back(Queued {
                leased: Leased {
                    message: row.message,
                    requeued_attempts: 0,
                },
                leased_at: now - waited,
                bytes,
            });
            self.hold(bytes);
        }
    }

    /// Starts queued rows while slots are free; a row that could outlive
    /// its lease is given back instead.
    fn start_deliveries(&mut self) {
        let mut too_late = 0;
        while self.deliveries.len() < self.drainer.settings.concurrency.max(1) {
            let Some(queued) = self.queue.pop_front() else {
                break;
            };
            if self.drainer.lease_too_short(queued.leased_at) {
                too_late += 1;
                self.release(queued);
                continue;
            }
            let message = &queued.leased.message;
            let span = tracing::info_span!(
                "deliver",
                outbox_id = message.id,
                attempt = message.attempts,
                topic = %message.topic
            );
            let drainer = self.drainer.clone();
            let leased = queued.leased;
            let task = self
                .deliveries
                .spawn(async move { drainer.attempt(leased).await }.instrument(span));
            self.in_flight.insert(task.id(), queued.bytes);
        }
        if too_late > 0 {
            tracing::warn!(
                released = too_late,
                "rows given back unstarted: the lease is too short for the batch; raise \
                 WEBHOOKD_OUTBOX_LEASE or WEBHOOKD_OUTBOX_CONCURRENCY, or lower WEBHOOKD_OUTBOX_BATCH"
            );
        }
    }

    /// Starts a lease when rows may be due, the queue is empty, a slot is
    /// free, and rows and bytes are left in the budget.
    fn lease_if_wanted(&mut self, stopping: bool) {
        if stopping || self.leasing.is_some() || self.gate != Gate::Open || !self.queue.is_empty() {
            return;
        }
        let settings = &self.drainer.settings;
        let held = self.deliveries.len();
        let held_rows = i64::try_from(held).unwrap_or(i64::MAX);
        if held >= settings.concurrency.max(1)
            || held_rows >= settings.batch
            || self.held_bytes >= settings.batch_bytes
        {
            return;
        }
        let budget = Budget {
            rows: settings.batch - held_rows,
            bytes: i64::try_from(settings.batch_bytes - self.held_bytes).unwrap_or(i64::MAX),
            oversized: held == 0,
        };
        let (pool, clock) = (self.drainer.pool.clone(), self.drainer.clock.clone());
        let route = self.drainer.route.clone();
        let terms = store::Terms {
            lease_secs: settings.lease.as_secs_f64(),
            max_attempts: settings.retry.max_attempts,
            ordered: settings.ordered,
        };
        count(&self.drainer.stats.lease_statements, 1);
        self.retry_at = None;
        self.leasing = Some(Box::pin(async move {
            let leased_at = clock.now();
            let lease = store::lease(&pool, &route, budget, terms, clock.pinned()).await;
            LeaseResult {
                budget,
                leased_at,
                lease,
            }
        }));
        if self.mode == Mode::Once {
            self.gate = Gate::Closed;
        }
    }

    /// Queues what the lease took and decides when to lease again. A failed
    /// lease is the pass's error in [`Mode::Once`], a backoff otherwise.
    fn leased(&mut self, result: LeaseResult) -> Result<(), sqlx::Error> {
        let LeaseResult {
            budget,
            leased_at,
            lease,
        } = result;
        let lease = match lease {
            Ok(lease) => lease,
            Err(error) if self.mode == Mode::Once => return Err(error),
            Err(error) => {
                crate::db::detection::notice(&error);
                self.failures = self.failures.saturating_add(1);
                tracing::warn!(error = %error, "outbox lease failed; backing off");
                let poll = self.drainer.settings.poll.max(Duration::from_secs(1));
                let wait = backoff(self.failures).min(poll * 10);
                self.gate = Gate::Backoff(Instant::now() + wait);
                return Ok(());
            }
        };
        self.failures = 0;
        let stats = &self.drainer.stats;
        let taken = lease.rows.len() + lease.abandoned.len();
        self.drained.leased += taken;
        self.drained.dead += lease.abandoned.len();
        count(&stats.dead, lease.abandoned.len());
        count(&stats.abandoned, lease.abandoned.len());
        for abandoned in &lease.abandoned {
            tracing::error!(
                outbox_id = abandoned.id,
                attempt = abandoned.attempts,
                error = %abandoned.error,
                "delivery dead-lettered: its attempts are spent"
            );
        }
        for leased in lease.rows {
            let bytes = leased.message.payload.len() as u64;
            self.queue.push_back(Queued {
                leased,
                leased_at,
                bytes,
            });
            self.hold(bytes);
        }
        if self.mode == Mode::Continuous {
            let taken = i64::try_from(taken).unwrap_or(i64::MAX);
            self.gate = if taken < lease.due {
                Gate::Full
            } else if lease.due < budget.rows {
                let poll = self.drainer.settings.poll;
                let next = lease
                    .next_due_secs
                    .map_or(poll, |secs| Duration::from_secs_f64(secs.clamp(0.0, 1e9)));
                let at = Instant::now() + next.min(poll).max(MIN_WAIT);
                Gate::Idle(self.retry_at.map_or(at, |retry| retry.min(at)))
            } else {
                Gate::Open
            };
        }
        Ok(())
    }

    /// A delivery ended: its bytes are free, its outcome waits to be recorded.
    fn finished(&mut self, joined: Result<(Id, Settled), JoinError>) {
        let (task, settled) = match joined {
            Ok(joined) => (Some(joined.0), Some(joined.1)),
            Err(error) => {
                tracing::error!(error = %error, "a delivery failed to finish; its lease will expire");
                self.drained.unrecorded += 1;
                (Some(error.id()), None)
            }
        };
        if let Some(bytes) = task.and_then(|task| self.in_flight.remove(&task)) {
            self.free(bytes);
        }
        if let Some(settled) = settled {
            self.recorder.push(settled);
        }
    }

    /// Gives a row back unstarted.
    fn release(&mut self, queued: Queued) {
        self.free(queued.bytes);
        let message = &queued.leased.message;
        self.recorder.push(Settled {
            id: message.id,
            attempts: message.attempts,
            attempt: Attempt::Released,
        });
    }

    /// Brings the next lease forward to `due`, when a row given back or
    /// retried is due again: a lease that found nothing else due, or that
    /// read the table before that outcome was recorded, could not know.
    fn due_again(&mut self, due: Option<Instant>) {
        let Some(due) = due else {
            return;
        };
        let due = self.retry_at.map_or(due, |at| at.min(due));
        self.retry_at = Some(due);
        if let Gate::Idle(at) = self.gate {
            self.gate = Gate::Idle(at.min(due));
        }
    }

    fn done(&self, stopping: bool) -> bool {
        let settled = self.queue.is_empty()
            && self.deliveries.is_empty()
            && self.leasing.is_none()
            && self.recorder.is_idle();
        settled
            && match self.mode {
                Mode::Once => self.gate == Gate::Closed,
                Mode::Continuous => stopping,
            }
    }

    /// The end of a pass, or a hard stop: deliveries still in flight are
    /// dropped (their leases expire, and another pass redelivers them); a
    /// lease in progress is waited for and its rows given back; every
    /// outcome known is recorded.
    async fn stop(&mut self) {
        if self.mode == Mode::Continuous {
            self.drainer.waker.accept(None, 0);
            self.take_handed(true);
        }
        self.deliveries.abort_all();
        for (_, bytes) in std::mem::take(&mut self.in_flight) {
            self.free(bytes);
        }
        if let Some(leasing) = self.leasing.take()
            && let Ok(lease) = leasing.await.lease
        {
            for leased in lease.rows {
                let message = &leased.message;
                self.recorder.push(Settled {
                    id: message.id,
                    attempts: message.attempts,
                    attempt: Attempt::Released,
                });
            }
        }
        while let Some(queued) = self.queue.pop_front() {
            self.release(queued);
        }
        let due = self.recorder.finish(&mut self.drained).await;
        self.due_again(due);
    }

    fn hold(&mut self, bytes: u64) {
        self.held_bytes += bytes;
        self.drainer.waker.drainer_holds(self.held_bytes);
        let stats = &self.drainer.stats;
        stats.held_bytes.fetch_add(bytes, Ordering::Relaxed);
        stats
            .peak_held_bytes
            .fetch_max(stats.held_bytes.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Bytes no longer held: a lease the byte budget stopped may run again.
    fn free(&mut self, bytes: u64) {
        if self.gate == Gate::Full {
            self.gate = Gate::Open;
        }
        self.held_bytes -= bytes;
        self.drainer.waker.drainer_holds(self.held_bytes);
        self.drainer
            .stats
            .held_bytes
            .fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// Sleeps until `at`, or forever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// `grace` from now, or far in the future.
fn deadline(grace: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(grace)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}
