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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use metrics::Histogram;
use sqlx::PgPool;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use super::engine::{self, Wake};
use super::fallback;
use super::{Receipt, receipt};
use crate::providers::Event;

use super::Error;

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

pub type Answer = Result<Receipt, Error>;

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

struct Job {
    event: Event,
    reply: oneshot::Sender<Answer>,
}

/// The queue in front of the executors. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Batcher {
    queue: mpsc::Sender<Job>,
    stats: Arc<BatchStats>,
    closed: CancellationToken,
}

impl Batcher {
    /// Starts the dispatcher on `tasks`, where its batches run too. It stops
    /// once every clone of the batcher is dropped and the queue is empty, or
    /// at [`Batcher::close`]; batches already running finish: waiting for
    /// `tasks` waits for them. `sizes` records each batch's events.
    pub fn start(
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
        Batcher {
            queue,
            stats,
            closed,
        }
    }

    /// Stops the dispatcher: events queued and not yet in a batch, and any
    /// submitted later, are answered [`Error::ShuttingDown`].
    pub fn close(&self) {
        self.closed.cancel();
    }

    pub fn stats(&self) -> &BatchStats {
        &self.stats
    }

    /// Queues `event` and waits for its batch's commit.
    pub async fn submit(&self, event: Event) -> Answer {
        let (reply, answer) = oneshot::channel();
        // Only a dispatcher that is gone (shutting down) drops a job.
        self.queue
            .send(Job { event, reply })
            .await
            .map_err(|_| Error::ShuttingDown)?;
        answer.await.map_err(|_| Error::ShuttingDown)?
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
    loop {
        // Queue while every executor is busy: the next batch takes it all.
        let (executor, first) = tokio::select! {
            biased;
            () = closed.cancelled() => break,
            next = next_batch(&executors, &mut jobs) => match next {
                Some(next) => next,
                None => break,
            },
        };
        let mut batch = vec![first];
        while batch.len() < settings.max_events {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        batches
            .tasks
            .spawn(run(batches.clone(), batch, Some(executor)));
    }
    // Whatever is still queued is dropped unanswered: its requests hear
    // `ShuttingDown`, and so do later ones.
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

async fn run(batches: Batches, jobs: Vec<Job>, executor: Option<OwnedSemaphorePermit>) {
    // A request that timed out while queued was answered 503 already: leave
    // its event to the provider's retry rather than apply it unannounced.
    let (events, replies): (Vec<Event>, Vec<_>) = jobs
        .into_iter()
        .filter(|job| !job.reply.is_closed())
        .map(|job| (job.event, Mutex::new(Some(job.reply))))
        .unzip();
    let stats = &batches.stats;
    stats.batches.fetch_add(1, Ordering::Relaxed);
    stats
        .events
        .fetch_add(events.len() as u64, Ordering::Relaxed);
    batches.sizes.record(events.len() as f64);
    let wanted = |i: usize| {
        let reply = replies[i].lock().expect("never poisoned");
        reply.as_ref().is_some_and(|reply| !reply.is_closed())
    };
    // The next batch starts as soon as this one's statements are done: its
    // commit's WAL flush then overlaps the next batch's work.
    let executor = Mutex::new(executor);
    let release = || drop(executor.lock().expect("never poisoned").take());
    match batch_releasing(&batches.pool, &events, wanted, &batches.wake, &release).await {
        Ok(answers) => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                if let Some(reply) = reply.into_inner().expect("never poisoned") {
                    // The receiver may have gone since: its request was answered 503.
                    let _ = reply.send(answer);
                }
            }
        }
        Err(error) => {
            // The next batch need not wait for these (one may wait on a
            // lock for as long as the statement timeout).
            release();
            stats.fallbacks.fetch_add(1, Ordering::Relaxed);
            let replies = replies
                .into_iter()
                .map(|reply| reply.into_inner().expect("never poisoned"));
            let pending = events.iter().zip(replies).collect();
            fallback::one_by_one(&batches.pool, &batches.wake, pending, &error).await;
        }
    }
}

/// The batch alone, without the fallback: one transaction for every wanted
/// event. A batch that loses an event before its commit (its request gave
/// up) rolls back and runs again without it. Answers in order; an event
/// that is not wanted gets an error nobody reads.
pub async fn try_batch(
    pool: &PgPool,
    events: &[Event],
    wanted: impl Fn(usize) -> bool,
    wake: &Wake,
) -> Result<Vec<Answer>, Error> {
    batch_releasing(pool, events, wanted, wake, &|| {}).await
}

/// [`try_batch`], calling `committing` as the commit is sent.
async fn batch_releasing(
    pool: &PgPool,
    events: &[Event],
    wanted: impl Fn(usize) -> bool,
    wake: &Wake,
    committing: &(dyn Fn() + Sync),
) -> Result<Vec<Answer>, Error> {
    loop {
        let live: Vec<usize> = (0..events.len()).filter(|&i| wanted(i)).collect();
        let batch: Vec<&Event> = live.iter().map(|&i| &events[i]).collect();
        let all_wanted = || live.iter().all(|&i| wanted(i));
        let committed = engine::commit(
            pool,
            &batch,
            engine::BEGIN_BATCH,
            wake,
            all_wanted,
            committing,
        );
        match committed.await {
            Ok(Some(outcomes)) => {
                let mut answers: Vec<Answer> = events.iter().map(|_| abandoned()).collect();
                for (i, outcome) in live.into_iter().zip(outcomes) {
                    answers[i] = Ok(receipt(outcome, &events[i]));
                }
                return Ok(answers);
            }
            Ok(None) => continue,
            Err(error) => return Err(error),
        }
    }
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
        .map(|event| {
            let (reply, answer) = oneshot::channel();
            let job = Job {
                event: event.clone(),
                reply,
            };
            (job, answer)
        })
        .unzip();
    run(batches, jobs, None).await;
    let mut out = Vec::with_capacity(answers.len());
    for answer in answers {
        out.push(answer.await.unwrap_or_else(|_| abandoned()));
    }
    out
}
