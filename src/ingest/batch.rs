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
//!   [`one_by_one`]);
//! - a request that gave up (answered 503) before its batch began to commit
//!   is never committed: the batch rolls back and runs again without it (one
//!   that gives up while the commit is in flight may still be committed; its
//!   retry is then a `duplicate`);
//! - locks are taken in one global order ([`super::engine`]), so batches
//!   cannot deadlock with each other or with one-event transactions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::join_all;
use metrics::Histogram;
use sqlx::PgPool;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use super::engine::{self, Wake};
use super::{Receipt, receipt};
use crate::providers::VerifiedEvent;
use crate::{db, effects, ledger, telemetry};

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

pub type Answer = Result<Receipt, Arc<sqlx::Error>>;

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
    event: VerifiedEvent,
    reply: oneshot::Sender<Answer>,
}

/// The queue in front of the executors. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Batcher {
    queue: mpsc::Sender<Job>,
    stats: Arc<BatchStats>,
}

impl Batcher {
    /// Starts the dispatcher. It stops once every clone of the batcher is
    /// dropped and the queue is empty; batches already running finish.
    /// `sizes` records each batch's events.
    pub fn start(pool: PgPool, settings: BatchSettings, wake: Wake, sizes: Histogram) -> Self {
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
            sizes,
        };
        tokio::spawn(dispatch(batches, jobs, settings));
        Batcher { queue, stats }
    }

    pub fn stats(&self) -> &BatchStats {
        &self.stats
    }

    /// Queues `event` and waits for its batch's commit.
    pub async fn submit(&self, event: VerifiedEvent) -> Answer {
        let (reply, answer) = oneshot::channel();
        // Only a dispatcher that is gone (shutting down) drops a job: 503.
        let gone = || Arc::new(sqlx::Error::PoolClosed);
        self.queue
            .send(Job { event, reply })
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// What every batch needs.
#[derive(Clone)]
struct Batches {
    pool: PgPool,
    wake: Wake,
    stats: Arc<BatchStats>,
    sizes: Histogram,
}

async fn dispatch(batches: Batches, mut jobs: mpsc::Receiver<Job>, settings: BatchSettings) {
    let executors = Arc::new(Semaphore::new(settings.concurrency));
    loop {
        // Queue while every executor is busy: the next batch takes it all.
        let Ok(executor) = executors.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = jobs.recv().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < settings.max_events {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        tokio::spawn(run(batches.clone(), batch, Some(executor)));
    }
}

async fn run(batches: Batches, jobs: Vec<Job>, executor: Option<OwnedSemaphorePermit>) {
    // A request that timed out while queued was answered 503 already: leave
    // its event to the provider's retry rather than apply it unannounced.
    let (events, replies): (Vec<VerifiedEvent>, Vec<_>) = jobs
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
            one_by_one(&batches, pending, &error).await;
        }
    }
}

/// The one fallback, after a failed batch: each event whose request still
/// waits in a transaction of its own ([`super::ingest`]: data the database
/// refuses rejects that event alone), answered as soon as it is done. A
/// request that gives up meanwhile has its transaction dropped, so that its
/// 503 leaves nothing behind. Not when the database itself is lost: one by
/// one would only wait for it again.
///
/// Events that share a key (an event id, a payment, a subscription, an
/// invoice, a wallet: [`effects::plan`]) run in arrival order, one after
/// the other, so a failed batch ends as it would have committed; groups
/// that share nothing run concurrently, at most [`FALLBACK_GROUPS`] at once,
/// so one hot key holds one connection, never the pool.
async fn one_by_one(batches: &Batches, pending: Vec<Pending<'_>>, error: &Arc<sqlx::Error>) {
    if db::is_connection_failure(error) {
        for (_, reply) in pending {
            if let Some(reply) = reply {
                let _ = reply.send(Err(error.clone()));
            }
        }
        return;
    }
    tracing::warn!(
        error = %telemetry::bounded_to(&error.to_string(), telemetry::MAX_LOGGED_ERROR_BYTES),
        events = pending.len(),
        "a batch failed: applying its events one by one"
    );
    let groups = Semaphore::new(FALLBACK_GROUPS);
    let one = |event: &VerifiedEvent, reply: Option<oneshot::Sender<Answer>>| {
        let (pool, wake) = (&batches.pool, &batches.wake);
        let event = event.clone();
        async move {
            let Some(mut reply) = reply.filter(|reply| !reply.is_closed()) else {
                return;
            };
            tokio::select! {
                answer = super::ingest_waking(pool, &event, wake) => {
                    let _ = reply.send(answer.map_err(Arc::new));
                }
                () = reply.closed() => {}
            }
        }
    };
    let mut by_group: Vec<Vec<Pending<'_>>> = Vec::new();
    let group_of = sharing_groups(pending.iter().map(|(event, _)| *event));
    for ((event, reply), group) in pending.into_iter().zip(group_of) {
        if by_group.len() <= group {
            by_group.resize_with(group + 1, Vec::new);
        }
        by_group[group].push((event, reply));
    }
    join_all(by_group.into_iter().map(|group| {
        let (groups, one) = (&groups, &one);
        async move {
            let Ok(_turn) = groups.acquire().await else {
                return;
            };
            for (event, reply) in group {
                one(event, reply).await;
            }
        }
    }))
    .await;
}

/// An event of a failed batch and its reply, if its request still waits.
type Pending<'a> = (&'a VerifiedEvent, Option<oneshot::Sender<Answer>>);

/// How many groups of a failed batch are applied at once.
const FALLBACK_GROUPS: usize = 4;

/// The group of each event: events that share an event id or any key of
/// their plans are in one group. Groups are numbered in order of their
/// first event.
fn sharing_groups<'a>(events: impl Iterator<Item = &'a VerifiedEvent>) -> Vec<usize> {
    let mut owner: HashMap<String, usize> = HashMap::new();
    let mut parent: Vec<usize> = Vec::new();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for (i, event) in events.enumerate() {
        parent.push(i);
        let plan = effects::plan(event);
        let keys = plan
            .keys
            .into_iter()
            .chain(plan.wallets.iter().map(|(u, c)| ledger::wallet_key(u, c)))
            .chain([format!("{}:{}", event.provider(), event.event_id())]);
        for key in keys {
            match owner.get(&key) {
                Some(&other) => {
                    let (a, b) = (root(&mut parent, other), root(&mut parent, i));
                    parent[a.max(b)] = a.min(b);
                }
                None => {
                    owner.insert(key, i);
                }
            }
        }
    }
    let mut numbers: HashMap<usize, usize> = HashMap::new();
    (0..parent.len())
        .map(|i| {
            let group = root(&mut parent, i);
            let next = numbers.len();
            *numbers.entry(group).or_insert(next)
        })
        .collect()
}

/// The batch alone, without the fallback: one transaction for every wanted
/// event. A batch that loses an event before its commit (its request gave
/// up) rolls back and runs again without it. Answers in order; an event
/// that is not wanted gets an error nobody reads.
pub async fn try_batch(
    pool: &PgPool,
    events: &[VerifiedEvent],
    wanted: impl Fn(usize) -> bool,
    wake: &Wake,
) -> Result<Vec<Answer>, Arc<sqlx::Error>> {
    batch_releasing(pool, events, wanted, wake, &|| {}).await
}

/// [`try_batch`], calling `committing` as the commit is sent.
async fn batch_releasing(
    pool: &PgPool,
    events: &[VerifiedEvent],
    wanted: impl Fn(usize) -> bool,
    wake: &Wake,
    committing: &(dyn Fn() + Sync),
) -> Result<Vec<Answer>, Arc<sqlx::Error>> {
    loop {
        let live: Vec<usize> = (0..events.len()).filter(|&i| wanted(i)).collect();
        let batch: Vec<&VerifiedEvent> = live.iter().map(|&i| &events[i]).collect();
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
            Err(error) => return Err(Arc::new(error)),
        }
    }
}

/// The answer to an event whose request is gone: nobody reads it.
fn abandoned() -> Answer {
    Err(Arc::new(sqlx::Error::PoolClosed))
}

/// Applies `events` as one batch, in order, and answers each: the batch
/// path without the dispatcher, for callers that form their own batches (a
/// sweep's page, a test). When the batch fails, its events are applied one
/// by one ([`one_by_one`]).
pub async fn apply(pool: &PgPool, events: &[VerifiedEvent], wake: Wake) -> Vec<Answer> {
    let batches = Batches {
        pool: pool.clone(),
        wake,
        stats: Arc::default(),
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
