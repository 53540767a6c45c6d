//! Group commit: verified events that arrive together share one
//! transaction ([`super::engine`]) and one commit, whatever their kind.
//!
//! A dispatcher hands whatever is queued (up to `max_events`) to the next
//! free executor (`concurrency` of them, one connection each). Under light
//! load a batch is the one event that arrived: nothing waits for company.
//! Each HTTP answer waits for its batch's commit.
//!
//! Guarantees, the same as one event per transaction in arrival order:
//! - the engine applies a batch's events in the order they were queued, so
//!   arrival order decides which of two events owns a natural key, and a
//!   refund queued before its credit is deferred and then applied with it;
//! - a copy of an event in the same batch, or in a concurrent one, answers
//!   `duplicate` once the first copy committed;
//! - a failing event never fails its neighbours: when the batch fails, its
//!   events are applied again one by one, each in its own transaction, in
//!   arrival order among those that share a key (the one fallback,
//!   [`fallback::one_by_one`]);
//! - a request that gave up (answered 503) before its batch began to commit
//!   is never committed: the batch rolls back and runs again without it (one
//!   that gives up while the commit is in flight may still be committed; its
//!   retry is then a `duplicate`);
//! - locks are taken in one global order ([`super::engine`]), so batches
//!   cannot deadlock with each other or with one-event transactions.

mod fallback;
mod running;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use metrics::Histogram;
use sqlx::PgPool;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use super::Error;
use super::engine::{self, Wake};
pub use super::receipt::Answer;
use super::receipt::Receipt;
use crate::effects::{self, Decoded};
use crate::providers::{Event, VerifiedEvent};
use running::Running;

/// How many events share a transaction, and how many batches run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSettings {
    /// Most events per batch (at least 1).
    pub max_events: usize,
    /// Most batches running their statements at once (at least 1), each
    /// holding one connection; a batch waiting for its commit's flush no
    /// longer counts, so the next one overlaps it.
    pub concurrency: usize,
}

/// What the batches of this process did, for `/metrics`.
#[derive(Debug, Default)]
pub struct BatchStats {
    /// Batches run (a batch that rolled back and ran again counts once).
    pub batches: AtomicU64,
    /// Events those batches carried.
    pub events: AtomicU64,
    /// Batches that failed and were applied one by one.
    pub fallbacks: AtomicU64,
}

/// One event to apply and where its answer goes.
struct Job {
    unit: Decoded,
    reply: oneshot::Sender<Answer>,
    /// Cancelled once its request gave up (answered 503): a batch that has
    /// not committed it yet leaves it to the provider's retry.
    gave_up: CancellationToken,
}

/// The request's side of a [`Job`]: dropping it (the request gave up)
/// cancels the job.
struct Waiting {
    answer: oneshot::Receiver<Answer>,
    _gives_up_when_dropped: DropGuard,
}

impl Job {
    /// A job whose request gives up when `gave_up` is cancelled, and where
    /// its answer arrives.
    fn new(unit: Decoded, gave_up: CancellationToken) -> (Job, oneshot::Receiver<Answer>) {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            unit,
            reply,
            gave_up,
        };
        (job, answer)
    }

    /// A request's job: it gives up when the request drops its side.
    fn for_request(unit: Decoded) -> (Job, Waiting) {
        let gave_up = CancellationToken::new();
        let guard = gave_up.clone().drop_guard();
        let (job, answer) = Job::new(unit, gave_up);
        let waiting = Waiting {
            answer,
            _gives_up_when_dropped: guard,
        };
        (job, waiting)
    }
}

/// Applies verified events through the group commit: the queue in front
/// of the executors. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Ingestor {
    queue: mpsc::Sender<Job>,
    stats: Arc<BatchStats>,
    closed: CancellationToken,
}

impl Ingestor {
    /// Starts the dispatcher on `tasks` (call inside the Tokio runtime),
    /// where its batches run too. It stops once every clone of the ingestor
    /// is dropped and the queue is empty, or at [`Ingestor::close`];
    /// batches already running finish: waiting for `tasks` waits for them.
    /// `wake` is how the drainer hears of new outbox rows.
    pub fn start(pool: PgPool, settings: BatchSettings, wake: Wake, tasks: &TaskTracker) -> Self {
        Self::start_with_sizes(pool, settings, wake, tasks, Histogram::noop())
    }

    /// [`Ingestor::start`], recording each batch's events in `sizes`.
    pub fn start_with_sizes(
        pool: PgPool,
        settings: BatchSettings,
        wake: Wake,
        tasks: &TaskTracker,
        sizes: Histogram,
    ) -> Self {
        let settings = BatchSettings {
            max_events: settings.max_events.max(1),
            concurrency: settings.concurrency.max(1),
        };
        let (queue, jobs) = mpsc::channel(settings.max_events * settings.concurrency * 4);
        let stats = Arc::new(BatchStats::default());
        let batches = Batches {
            pool,
            wake,
            stats: stats.clone(),
            tasks: tasks.clone(),
            sizes,
        };
        let closed = CancellationToken::new();
        tasks.spawn(dispatch(batches, jobs, settings, closed.clone()));
        Ingestor {
            queue,
            stats,
            closed,
        }
    }

    /// Stops taking events (shutdown, once the server stopped): events
    /// queued and not yet in a batch, and any submitted later, are answered
    /// [`Error::ShuttingDown`]; batches running finish.
    pub fn close(&self) {
        self.closed.cancel();
    }

    pub fn batch_stats(&self) -> &BatchStats {
        &self.stats
    }

    /// Decodes `event` ([`effects::decode`], once) and queues it, then
    /// waits for its batch's commit. Dropping the future (the request gave
    /// up) takes it out of any batch not yet committing.
    pub async fn ingest(&self, event: VerifiedEvent) -> Answer {
        let unit = effects::decode(event.into_event());
        let (job, waiting) = Job::for_request(unit);
        // Only a dispatcher that is gone (shutting down) drops a job.
        self.queue
            .send(job)
            .await
            .map_err(|_| Error::ShuttingDown)?;
        waiting.answer.await.map_err(|_| Error::ShuttingDown)?
    }
}

/// What every batch needs.
#[derive(Clone)]
struct Batches {
    pool: PgPool,
    wake: Wake,
    stats: Arc<BatchStats>,
    /// Where batches run.
    tasks: TaskTracker,
    sizes: Histogram,
}

async fn dispatch(
    batches: Batches,
    mut jobs: mpsc::Receiver<Job>,
    settings: BatchSettings,
    closed: CancellationToken,
) {
    let executors = Arc::new(Semaphore::new(settings.concurrency));
    let running = Arc::new(Running::default());
    // Taken from the channel, not in a batch yet: arrival order.
    let mut queued: VecDeque<Job> = VecDeque::new();
    let room = settings.max_events * settings.concurrency * 4;
    let mut open = true;
    loop {
        let freed = running.freed();
        // Queue while every executor is busy: the next batch takes it all.
        let executor = if queued.is_empty() {
            if !open {
                break;
            }
            let (executor, first) = tokio::select! {
                biased;
                () = closed.cancelled() => break,
                next = next_batch(&executors, &mut jobs) => match next {
                    Some(next) => next,
                    None => break,
                },
            };
            queued.push_back(first);
            executor
        } else {
            tokio::select! {
                biased;
                () = closed.cancelled() => break,
                executor = executors.clone().acquire_owned() => match executor {
                    Ok(executor) => executor,
                    Err(_) => break,
                },
            }
        };
        while open && queued.len() < room {
            match jobs.try_recv() {
                Ok(job) => queued.push_back(job),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        let (batch, held) = running.take(&mut queued, settings.max_events);
        if batch.is_empty() {
            // Everything queued waits for the keys of a running batch.
            drop((executor, held));
            tokio::select! {
                biased;
                () = closed.cancelled() => break,
                () = freed => {}
                job = jobs.recv(), if open && queued.len() < room => match job {
                    Some(job) => queued.push_back(job),
                    None => open = false,
                },
            }
            continue;
        }
        batches
            .tasks
            .spawn(run(batches.clone(), batch, Some((executor, held))));
    }
    // Whatever is still queued is dropped unanswered: its requests hear
    // `ShuttingDown`, and so do later ones.
    drop(queued);
    jobs.close();
}

/// A free executor and the first job for it; `None` once the queue is closed.
async fn next_batch(
    executors: &Arc<Semaphore>,
    jobs: &mut mpsc::Receiver<Job>,
) -> Option<(OwnedSemaphorePermit, Job)> {
    let executor = executors.clone().acquire_owned().await.ok()?;
    Some((executor, jobs.recv().await?))
}

/// Runs `jobs` as one batch on `executor` (a dispatcher's: a permit, and
/// the hold on the batch's keys), both let go once its statements are
/// done; after a failure, the keys only once its fallback is done.
async fn run(
    batches: Batches,
    jobs: Vec<Job>,
    executor: Option<(OwnedSemaphorePermit, running::Held)>,
) {
    // A request that timed out while queued was answered 503 already: leave
    // its event to the provider's retry rather than apply it unannounced.
    let jobs: Vec<Job> = jobs
        .into_iter()
        .filter(|job| !job.gave_up.is_cancelled())
        .collect();
    let stats = &batches.stats;
    stats.batches.fetch_add(1, Ordering::Relaxed);
    stats.events.fetch_add(jobs.len() as u64, Ordering::Relaxed);
    batches.sizes.record(jobs.len() as f64);
    // The next batch starts as soon as this one's statements are done: its
    // commit's WAL flush then overlaps the next batch's work.
    let (mut executor, mut keys) = executor.unzip();
    match group_commit(&batches.pool, &jobs, &batches.wake, || {
        drop((executor.take(), keys.take()))
    })
    .await
    {
        Ok(answers) => {
            for (job, answer) in jobs.into_iter().zip(answers) {
                // The receiver may have gone since: its request was answered 503.
                let _ = job.reply.send(answer);
            }
        }
        Err(error) => {
            // The next batch need not wait for these (one may wait on a
            // lock for as long as the statement timeout).
            drop(executor);
            stats.fallbacks.fetch_add(1, Ordering::Relaxed);
            fallback::one_by_one(&batches.pool, &batches.wake, jobs, &error).await;
            drop(keys);
        }
    }
}

/// The batch alone, without the fallback: one transaction for every job
/// whose request still waits. A batch that loses a job before its commit
/// (its request gave up) rolls back and runs again without it. Answers in
/// order; a job that gave up gets an error nobody reads. `committing` runs
/// once, as the commit is sent.
async fn group_commit(
    pool: &PgPool,
    jobs: &[Job],
    wake: &Wake,
    committing: impl FnOnce(),
) -> Result<Vec<Answer>, Error> {
    loop {
        let live: Vec<usize> = (0..jobs.len())
            .filter(|&i| !jobs[i].gave_up.is_cancelled())
            .collect();
        let units: Vec<&Decoded> = live.iter().map(|&i| &jobs[i].unit).collect();
        let prepared = engine::prepare(pool, &units, engine::BEGIN_BATCH, wake).await?;
        if live.iter().any(|&i| jobs[i].gave_up.is_cancelled()) {
            prepared.rollback().await?;
            continue;
        }
        committing();
        let outcomes = prepared.commit(wake).await?;
        let mut answers: Vec<Answer> = jobs.iter().map(|_| abandoned()).collect();
        for (i, outcome) in live.into_iter().zip(outcomes) {
            answers[i] = Ok(Receipt::of(outcome, jobs[i].unit.event()));
        }
        return Ok(answers);
    }
}

/// The batch path without the dispatcher and the fallback, for tests:
/// `events` as one batch whose requests give up as `gave_up` says (one
/// token per event). The answers, in order, once it committed.
pub async fn try_batch(
    pool: &PgPool,
    events: &[Event],
    gave_up: &[CancellationToken],
    wake: &Wake,
) -> Result<Vec<Answer>, Error> {
    let (jobs, _answers): (Vec<Job>, Vec<_>) = events
        .iter()
        .zip(gave_up)
        .map(|(event, gave_up)| Job::new(effects::decode(event.clone()), gave_up.clone()))
        .unzip();
    group_commit(pool, &jobs, wake, || {}).await
}

/// The answer to an event whose request is gone: nobody reads it.
fn abandoned() -> Answer {
    Err(Error::Abandoned)
}

/// Applies `events` as one batch, in order, and answers each: the batch
/// path without the dispatcher, for callers that form their own batches (a
/// sweep's page, a test). When the batch fails, its events are applied one
/// by one ([`fallback::one_by_one`]).
pub async fn apply(pool: &PgPool, events: &[Event], wake: Wake) -> Vec<Answer> {
    let batches = Batches {
        pool: pool.clone(),
        wake,
        stats: Arc::default(),
        tasks: TaskTracker::new(),
        sizes: Histogram::noop(),
    };
    let (jobs, answers): (Vec<Job>, Vec<_>) = events
        .iter()
        .map(|event| Job::new(effects::decode(event.clone()), CancellationToken::new()))
        .unzip();
    run(batches, jobs, None).await;
    let mut out = Vec::with_capacity(answers.len());
    for answer in answers {
        out.push(answer.await.unwrap_or_else(|_| abandoned()));
    }
    out
}
