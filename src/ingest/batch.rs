//! Group commit for plain credits ([`effects::plain_credit`]): deliveries that
//! arrive together share one transaction, two statements and one commit.
//!
//! A dispatcher hands whatever is queued (up to `max_events`) to the next
//! free executor (`concurrency` of them, one connection each). Under light
//! load a batch is the one event that arrived: nothing waits for company.
//! Each HTTP answer waits for its batch's commit.
//!
//! Guarantees, the same as one event per transaction:
//! - a copy of an event in the same batch, or in a concurrent one, answers
//!   `duplicate` once the first copy committed (a concurrent claim waits on
//!   the primary key, as in the one-by-one path);
//! - a failing event never fails its neighbours: when the batch fails, its
//!   events are applied again one by one, each in its own transaction;
//! - locks are taken in one global order, so batches cannot deadlock with
//!   each other or with one-event transactions: event claims sorted by
//!   `(provider, event_id)`, then the credits' advisory locks sorted by key,
//!   then the wallet rows sorted by `(user_id, currency)`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::join_all;
use serde_json::json;
use sqlx::{PgConnection, PgPool};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use super::Receipt;
use crate::effects::{self, Outcome, PlainCredit};
use crate::providers::VerifiedEvent;
use crate::{db, events, outbox, telemetry};

/// How a batch's transaction begins (one round trip):
/// - it waits at most 1 s for any one lock (a row another session holds, a
///   claim of a copy in flight), then fails and its credits are applied one
///   by one, each waiting as long as the statement timeout allows: one hot
///   row never stalls the batches behind it;
/// - its statements run on generic plans, planned once per connection: a
///   custom plan of the credit statement costs more than running it for a
///   dozen events. Every lookup in them is by key, so they are planned with
///   sequential scans disabled: a plan made while a table was nearly empty
///   must not keep scanning it as it grows.
const BEGIN: &str = "begin; set local lock_timeout = '1s'; \
    set local plan_cache_mode = force_generic_plan; set local enable_seqscan = off";

/// How many credits share a statement, and how many batches run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSettings {
    /// Most events per batch (at least 1).
    pub max_events: usize,
    /// Most batches in flight (at least 1), each holding one connection.
    pub concurrency: usize,
}

pub type Answer = Result<Receipt, Arc<sqlx::Error>>;

/// What the batches of this process did, for `/metrics`.
#[derive(Debug, Default)]
pub struct BatchStats {
    /// Batches run (a batch that rolled back and ran again counts once).
    pub batches: AtomicU64,
    /// Credits those batches carried.
    pub events: AtomicU64,
    /// Batches that failed and were applied one by one.
    pub fallbacks: AtomicU64,
}

/// A verified credit and its parsed effect, waiting for a batch.
#[derive(Debug, Clone)]
pub struct Credit {
    pub event: VerifiedEvent,
    pub credit: PlainCredit,
}

struct Job {
    credit: Credit,
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
    pub fn start(pool: PgPool, settings: BatchSettings) -> Self {
        let settings = BatchSettings {
            max_events: settings.max_events.max(1),
            concurrency: settings.concurrency.max(1),
        };
        let (queue, jobs) = mpsc::channel(settings.max_events * settings.concurrency * 4);
        let stats = Arc::new(BatchStats::default());
        tokio::spawn(dispatch(pool, jobs, settings, stats.clone()));
        Batcher { queue, stats }
    }

    pub fn stats(&self) -> &BatchStats {
        &self.stats
    }

    /// Queues `credit` and waits for its batch's commit.
    pub async fn submit(&self, credit: Credit) -> Answer {
        let (reply, answer) = oneshot::channel();
        // Only a dispatcher that is gone (shutting down) drops a job: 503.
        let gone = || Arc::new(sqlx::Error::PoolClosed);
        self.queue
            .send(Job { credit, reply })
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

async fn dispatch(
    pool: PgPool,
    mut jobs: mpsc::Receiver<Job>,
    settings: BatchSettings,
    stats: Arc<BatchStats>,
) {
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
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats
            .events
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        tokio::spawn(run(pool.clone(), batch, executor, stats.clone()));
    }
}

async fn run(pool: PgPool, jobs: Vec<Job>, executor: OwnedSemaphorePermit, stats: Arc<BatchStats>) {
    // A request that timed out while queued was answered 503 already: leave
    // its event to the provider's retry rather than apply it unannounced.
    let (credits, replies): (Vec<Credit>, Vec<_>) = jobs
        .into_iter()
        .filter(|job| !job.reply.is_closed())
        .map(|job| (job.credit, Mutex::new(Some(job.reply))))
        .unzip();
    let wanted = |i: usize| {
        let reply = replies[i].lock().expect("never poisoned");
        reply.as_ref().is_some_and(|reply| !reply.is_closed())
    };
    let answer = |i: usize, answer: Answer| {
        if let Some(reply) = replies[i].lock().expect("never poisoned").take() {
            // The receiver may have gone since: its request was answered 503.
            let _ = reply.send(answer);
        }
    };
    match try_batch(&pool, &credits, wanted).await {
        Ok(answers) => {
            for (i, outcome) in answers.into_iter().enumerate() {
                answer(i, outcome);
            }
        }
        Err(error) => {
            // The next batch need not wait for these (one may wait on a
            // lock for as long as the statement timeout).
            drop(executor);
            stats.fallbacks.fetch_add(1, Ordering::Relaxed);
            if !worth_one_by_one(&error, credits.len()) {
                for i in 0..credits.len() {
                    answer(i, Err(error.clone()));
                }
                return;
            }
            let replies = replies
                .into_iter()
                .map(|reply| reply.into_inner().expect("never poisoned"));
            join_all(credits.iter().zip(replies).filter_map(|(credit, reply)| {
                let mut reply = reply.filter(|reply| !reply.is_closed())?;
                let pool = &pool;
                Some(async move {
                    tokio::select! {
                        answer = super::ingest(pool, &credit.event) => {
                            let _ = reply.send(answer.map_err(Arc::new));
                        }
                        // The request was answered (it timed out): drop its
                        // transaction, so that its 503 leaves nothing behind.
                        () = reply.closed() => {}
                    }
                })
            }))
            .await;
        }
    }
}

/// Whether a failed batch's credits should be applied again one by one (and
/// says so in the log): not when the database itself is lost, since one by
/// one would only wait for it again.
fn worth_one_by_one(error: &sqlx::Error, events: usize) -> bool {
    if db::is_connection_failure(error) {
        return false;
    }
    tracing::warn!(
        error = %telemetry::bounded_to(&error.to_string(), telemetry::MAX_LOGGED_ERROR_BYTES),
        events,
        "a batch failed: applying its events one by one"
    );
    true
}

/// Applies `credits` in one transaction, answering each in order; when that
/// fails, applies them again one by one. `wanted(index)` turns false once a
/// credit's request was answered (it timed out): such a credit is never
/// committed, so its 503 leaves nothing behind.
pub async fn apply(
    pool: &PgPool,
    credits: &[Credit],
    wanted: impl Fn(usize) -> bool,
) -> Vec<Answer> {
    match try_batch(pool, credits, &wanted).await {
        Ok(answers) => answers,
        Err(error) => {
            let answers = Mutex::new(credits.iter().map(|_| abandoned()).collect::<Vec<_>>());
            let answer = |i: usize, answer: Answer| {
                answers.lock().expect("never poisoned")[i] = answer;
            };
            one_by_one(pool, credits, &wanted, error, answer).await;
            answers.into_inner().expect("never poisoned")
        }
    }
}

/// The answer to a credit whose request is gone: nobody reads it.
fn abandoned() -> Answer {
    Err(Arc::new(sqlx::Error::PoolClosed))
}

/// The batch alone, without the one-by-one fallback: one transaction for
/// every wanted credit. A batch that loses a credit before its commit rolls
/// back and runs again without it.
pub async fn try_batch(
    pool: &PgPool,
    credits: &[Credit],
    wanted: impl Fn(usize) -> bool,
) -> Result<Vec<Answer>, Arc<sqlx::Error>> {
    loop {
        let live: Vec<usize> = (0..credits.len()).filter(|&i| wanted(i)).collect();
        // The first copy of each event goes into the batch (`slot`); later
        // copies (`None`) answer `duplicate` once it committed.
        let mut seen = HashSet::with_capacity(live.len());
        let mut unique = Vec::with_capacity(live.len());
        let slot: Vec<Option<usize>> = live
            .iter()
            .map(|&i| {
                let event = &credits[i].event;
                seen.insert((event.provider(), event.event_id())).then(|| {
                    unique.push(&credits[i]);
                    unique.len() - 1
                })
            })
            .collect();
        let all_wanted = || live.iter().all(|&i| wanted(i));
        match commit(pool, &unique, all_wanted).await {
            Ok(Some(outcomes)) => {
                let mut answers: Vec<Answer> = credits.iter().map(|_| abandoned()).collect();
                for (i, slot) in live.into_iter().zip(slot) {
                    let outcome = slot.map_or(Outcome::Duplicate, |slot| outcomes[slot]);
                    answers[i] = Ok(super::receipt(outcome, &credits[i].event));
                }
                return Ok(answers);
            }
            Ok(None) => continue,
            Err(error) => return Err(Arc::new(error)),
        }
    }
}

/// After a failed batch: each wanted credit in its own transaction,
/// concurrently (copies of one event serialise on its claim, as they would
/// arriving one by one), each answered as soon as it is done, so a failing
/// or waiting credit holds back no other.
async fn one_by_one(
    pool: &PgPool,
    credits: &[Credit],
    wanted: impl Fn(usize) -> bool,
    error: Arc<sqlx::Error>,
    answer: impl Fn(usize, Answer),
) {
    if !worth_one_by_one(&error, credits.len()) {
        for i in 0..credits.len() {
            answer(i, Err(error.clone()));
        }
        return;
    }
    let answer = &answer;
    join_all(credits.iter().enumerate().filter(|(i, _)| wanted(*i)).map(
        |(i, credit)| async move {
            answer(
                i,
                super::ingest(pool, &credit.event).await.map_err(Arc::new),
            );
        },
    ))
    .await;
}

/// The batch's transaction: claim, lock, credit, announce, record. Returns
/// each event's outcome, in order (`duplicate` for events recorded before),
/// or `None` after rolling back because `all_wanted()` turned false.
async fn commit(
    pool: &PgPool,
    credits: &[&Credit],
    all_wanted: impl Fn() -> bool,
) -> Result<Option<Vec<Outcome>>, sqlx::Error> {
    let mut outcomes = vec![Outcome::Duplicate; credits.len()];
    if credits.is_empty() {
        return Ok(Some(outcomes));
    }
    let mut tx = pool.begin_with(BEGIN).await?;
    let claimed = claim_and_lock(&mut tx, credits).await?;
    if claimed.is_empty() {
        tx.rollback().await?;
        return Ok(Some(outcomes));
    }
    let key = |c: &Credit| (c.event.provider().to_owned(), c.event.event_id().to_owned());
    let claimed: Vec<(usize, &Credit)> = credits
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, c)| claimed.contains(&key(c)))
        .collect();
    let batch: Vec<&Credit> = claimed.iter().map(|(_, c)| *c).collect();
    let posted = post_credits(&mut tx, &batch).await?;
    for (i, credit) in claimed {
        let event = &credit.event;
        let Some(posted) = posted
            .iter()
            .find(|p| p.provider == event.provider() && p.event_id == event.event_id())
        else {
            return Err(sqlx::Error::RowNotFound);
        };
        outcomes[i] = match posted.entry_id {
            None => Outcome::Ignored,
            Some(_) if !posted.waiting => Outcome::Processed,
            Some(entry_id) => {
                // Refunds that arrived before this credit: applied now, in
                // this transaction, as the one-by-one path does.
                let source_ref = &credit.credit.source_ref;
                let applied =
                    effects::apply_waiting(&mut tx, event.provider(), source_ref, event.event_id())
                        .await?;
                let detail = json!({
                    "entry_id": entry_id,
                    "balance_minor": posted.balance_minor,
                    "outbox_id": posted.outbox_id,
                    "applied_deferred": applied,
                });
                events::record_outcome(
                    &mut tx,
                    event.provider(),
                    event.event_id(),
                    Outcome::Processed,
                    &detail,
                )
                .await?;
                Outcome::Processed
            }
        };
    }
    if !all_wanted() {
        tx.rollback().await?;
        return Ok(None);
    }
    tx.commit().await?;
    Ok(Some(outcomes))
}

/// Claims the events (sorted, so concurrent batches claim in one order) and
/// then takes their credits' advisory locks (sorted by key). Returns the
/// events claimed: the others were recorded before.
async fn claim_and_lock(
    conn: &mut PgConnection,
    credits: &[&Credit],
) -> Result<HashSet<(String, String)>, sqlx::Error> {
    let column = |f: fn(&Credit) -> String| credits.iter().map(|c| f(c)).collect::<Vec<_>>();
    let payloads = credits
        .iter()
        .map(|c| c.event.stored_payload().map(str::to_owned))
        .collect::<Result<Vec<_>, _>>()
        // Parsed as JSON before it got here, so this cannot fail in practice.
        .map_err(|e| sqlx::Error::Decode(e.into()))?;
    let created: Vec<Option<i64>> = credits.iter().map(|c| c.event.created()).collect();
    // The outer select takes the locks in the subquery's (sorted) order; the
    // sort reads every claimed row first, so all claims precede all locks.
    let claimed = sqlx::query!(
        r#"
        with input as (
            select * from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[])
                as input (provider, event_id, event_type, payload, created, lock_key, received_via)
        ), claimed as (
            insert into processed_events
                (provider, event_id, event_type, outcome, payload, provider_created_at, received_via)
            select provider, event_id, event_type, 'pending', payload::jsonb, to_timestamp(created), received_via
            from input
            order by provider, event_id
            on conflict (provider, event_id) do nothing
            returning provider, event_id
        )
        select locked.provider as "provider!", locked.event_id as "event_id!",
               pg_advisory_xact_lock(locked.key) as "locked!: ()"
        from (
            select claimed.provider, claimed.event_id, hashtextextended(input.provider || ':' || input.lock_key, 0) as key
            from claimed join input using (provider, event_id)
            order by key
        ) as locked
        "#,
        &column(|c| c.event.provider().to_owned()),
        &column(|c| c.event.event_id().to_owned()),
        &column(|c| c.event.event_type().to_owned()),
        &payloads,
        &created as &[Option<i64>],
        &column(|c| effects::credit_lock(&c.credit.source_ref)),
        &column(|c| c.event.via().as_str().to_owned()),
    )
    .fetch_all(conn)
    .await?;
    Ok(claimed
        .into_iter()
        .map(|row| (row.provider, row.event_id))
        .collect())
}

/// One claimed credit, posted (`entry_id`) or owned by another event.
struct Posted {
    provider: String,
    event_id: String,
    entry_id: Option<i64>,
    balance_minor: Option<i64>,
    outbox_id: Option<i64>,
    /// Events are deferred until this credit existed.
    waiting: bool,
}

/// Posts every claimed credit in one statement: the entries (a payment
/// credited before, by any event, posts nothing and its event is `ignored`
/// with the owner), the wallets (one update per wallet, in key order), the
/// `wallet.credited` rows (each with its own balance after its entry), and
/// the events' outcomes. Call with the credits' locks held: the statement
/// then sees every credit and deferred refund committed before it.
async fn post_credits(
    conn: &mut PgConnection,
    credits: &[&Credit],
) -> Result<Vec<Posted>, sqlx::Error> {
    let column = |f: fn(&Credit) -> String| credits.iter().map(|c| f(c)).collect::<Vec<_>>();
    let amounts: Vec<i64> = credits.iter().map(|c| c.credit.amount_minor).collect();
    let contexts: Vec<serde_json::Value> =
        credits.iter().map(|c| c.credit.context.clone()).collect();
    sqlx::query_as!(
        Posted,
        r#"
        with input as (
            select * from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::jsonb[])
                with ordinality
                as input (provider, event_id, user_id, currency, source_ref, amount_minor, context, position)
        ), entry as (
            -- In arrival order: of two events crediting one payment, the
            -- first to arrive owns the credit.
            insert into wallet_entries
                (user_id, currency, amount_minor, kind, provider, source_ref, event_id)
            select user_id, currency, amount_minor, 'credit', provider, source_ref, event_id
            from input
            order by position
            on conflict (provider, kind, source_ref) do nothing
            returning id, provider, event_id, user_id, currency, amount_minor, source_ref
        ), wallet as (
            insert into wallets (user_id, currency, balance_minor)
            select user_id, currency, sum(amount_minor)::bigint
            from entry
            group by user_id, currency
            order by user_id, currency
            on conflict (user_id, currency) do update
                set balance_minor = wallets.balance_minor + excluded.balance_minor,
                    updated_at = now()
            returning user_id, currency, balance_minor
        ), posted as (
            -- The balance right after each entry: the wallet's new balance
            -- less the entries of this batch that come after it.
            select entry.id, entry.provider, entry.event_id, entry.user_id, entry.currency,
                   entry.amount_minor,
                   wallet.balance_minor - coalesce(sum(entry.amount_minor) over (
                       partition by entry.user_id, entry.currency order by entry.id
                       rows between 1 following and unbounded following), 0)::bigint
                       as balance_minor
            from entry join wallet using (user_id, currency)
        ), announced as (
            insert into outbox (topic, dedupe_key, provider, event_id, payload)
            select 'wallet.credited', posted.provider || ':' || posted.event_id,
                   posted.provider, posted.event_id,
                   jsonb_build_object(
                       'user_id', posted.user_id, 'currency', posted.currency,
                       'amount_minor', posted.amount_minor, 'balance_minor', posted.balance_minor,
                       'entry_id', posted.id
                   ) || input.context
            from posted join input using (provider, event_id)
            order by posted.id
            on conflict do nothing
            returning id, provider, event_id
        ), result as (
            select input.provider, input.event_id, input.source_ref,
                   posted.id as entry_id, posted.balance_minor, announced.id as outbox_id,
                   case when posted.id is null then coalesce(
                       (select e.event_id from entry e
                        where e.provider = input.provider and e.source_ref = input.source_ref),
                       (select w.event_id from wallet_entries w
                        where w.provider = input.provider and w.kind = 'credit'
                          and w.source_ref = input.source_ref)
                   ) end as owner_event_id,
                   posted.id is not null and exists (
                       select 1 from deferred_events d
                       where d.provider = input.provider and d.waits_for = input.source_ref
                   ) as waiting
            from input
            left join posted using (provider, event_id)
            left join announced using (provider, event_id)
        ), recorded as (
            update processed_events e
            set outcome = case when r.entry_id is null then 'ignored' else 'processed' end,
                detail = case when r.entry_id is null
                    then jsonb_build_object(
                        'reason', 'this payment was already credited',
                        'owner_event_id', r.owner_event_id)
                    else jsonb_build_object(
                        'entry_id', r.entry_id, 'balance_minor', r.balance_minor,
                        'outbox_id', r.outbox_id, 'applied_deferred', '[]'::jsonb)
                    end
            from result r
            where e.provider = r.provider and e.event_id = r.event_id
        )
        select r.provider as "provider!", r.event_id as "event_id!", r.entry_id as "entry_id?",
               r.balance_minor as "balance_minor?", r.outbox_id as "outbox_id?",
               r.waiting as "waiting!"
        from result r, (select pg_notify($8, '')) as notify
        "#,
        &column(|c| c.event.provider().to_owned()),
        &column(|c| c.event.event_id().to_owned()),
        &column(|c| c.credit.user_id.clone()),
        &column(|c| c.credit.currency.clone()),
        &column(|c| c.credit.source_ref.clone()),
        &amounts,
        &contexts,
        outbox::CHANNEL,
    )
    .fetch_all(conn)
    .await
}
