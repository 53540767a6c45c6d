//! Property: group commit changes nothing. Random histories over every
//! provider and event kind, Stripe Checkout's flows among them ([`history`],
//! [`checkout`]), with copies and in any order, end
//! in the same tables ([`snapshot`]) and the same outcome per event as when
//! each event is applied in its own transaction, in arrival order:
//! - applied in consecutive batches, one transaction each
//!   ([`ingest::ingest_batch`]): the same tables exactly, and the same outcome at
//!   every position (a copy answered `duplicate` in one is `duplicate` in
//!   the other);
//! - submitted all at once, copies too, to the concurrent batcher
//!   ([`Ingestor`]): the same order-independent state
//!   ([`settled::Settled`]) and one answer other than `duplicate` per event
//!   id, for histories in which no two events race ([`Variant::Concurrent`]);
//! - either way, each side ends in what the history's events say whatever
//!   their order ([`expected`]): every Checkout payment credited at most
//!   once, to its session's owner, with its refunds; nothing left waiting
//!   but refunds of payments never made and payments no event owns.
//!
//! Each property runs its cases on two databases of its own, emptied between
//! cases: creating and dropping a database costs seconds here, more than a
//! case. No server runs, since its outbox drainer would deliver the rows
//! being compared. Cases come from a fixed seed (`PROPERTY_CASES` sets how
//! many, `PROPERTY_SEED` picks another sequence); a failure prints the
//! case's history in arrival order and the rows that differ.

mod bodies;
mod checkout;
mod expected;
mod history;
mod plan;
mod settled;
mod snapshot;

use std::collections::{BTreeMap, HashMap};
use tokio_util::task::TaskTracker;

use futures_util::future::join_all;
use proptest::collection::vec;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use webhookd::events::Outcome;
use webhookd::ingest::batch::BatchSettings;
use webhookd::ingest::{self, Ingestor, Receipt, Wake};
use webhookd::providers::{Event, testing};

use crate::helpers::assert_consistent;
use expected::assert_settles;
use history::{History, MAX_EVENTS, Variant, history};
use settled::assert_same;
use snapshot::snapshot;

#[sqlx::test]
async fn every_history_applied_in_batches_matches_one_event_per_transaction(pool: PgPool) {
    let databases = Databases::beside(pool).await;
    let (mut runner, seed) = runner(17);
    let strategy = (history(Variant::Exact), vec(1..=8usize, MAX_EVENTS));
    for case in 0..cases(20) {
        let (history, sizes) = strategy.new_tree(&mut runner).unwrap().current();
        let batches = batches(&history.events, &sizes);
        let sizes: Vec<usize> = batches.iter().map(|batch| batch.len()).collect();
        let context = databases.context(case, seed, &format!("batches of {sizes:?}"), &history);
        databases.empty().await;

        let expected = one_event_per_transaction(&databases.one_by_one, &history, &context).await;
        let mut batched = Vec::with_capacity(history.events.len());
        for batch in batches {
            let answers = ingest::ingest_batch(&databases.other, batch).await;
            assert_eq!(answers.len(), batch.len(), "{context}");
            for (event, answer) in batch.iter().zip(answers) {
                batched.push(outcome(event, answer.map_err(|e| e.to_string()), &context));
            }
        }

        assert_same_outcomes(&history, [&expected, &batched], &context);
        assert_same(
            &snapshot(&databases.one_by_one).await,
            &snapshot(&databases.other).await,
            ["one by one", "batched"],
            &context,
        );
        assert_consistent(&databases.one_by_one).await;
        assert_consistent(&databases.other).await;
        assert_settles(&databases.one_by_one, &history, &context).await;
        assert_settles(&databases.other, &history, &context).await;
    }
    databases.remove().await;
}

#[sqlx::test]
async fn every_history_through_the_concurrent_batcher_matches_one_event_per_transaction(
    pool: PgPool,
) {
    let databases = Databases::beside(pool).await;
    let (mut runner, seed) = runner(23);
    let strategy = (history(Variant::Concurrent), 1..=16usize, 1..=4usize);
    for case in 0..cases(20) {
        let (history, max_events, concurrency) = strategy.new_tree(&mut runner).unwrap().current();
        let settings = format!("max_events {max_events}, concurrency {concurrency}");
        let context = databases.context(case, seed, &settings, &history);
        let races = history.races();
        assert!(races.is_empty(), "{context}\nraces: {races:#?}");
        databases.empty().await;

        let expected = one_event_per_transaction(&databases.one_by_one, &history, &context).await;
        assert_one_answer_per_event(&history, &expected, &context);
        let ingestor = Ingestor::start(
            databases.other.clone(),
            BatchSettings {
                max_events,
                concurrency,
            },
            Wake::Notify,
            &TaskTracker::new(),
        );
        let answers = join_all(
            history
                .events
                .iter()
                .map(|event| ingestor.ingest(testing::assume_verified(event.clone()))),
        )
        .await;
        drop(ingestor);
        let concurrent: Vec<Outcome> = history
            .events
            .iter()
            .zip(answers)
            .map(|(event, answer)| outcome(event, answer.map_err(|e| e.to_string()), &context))
            .collect();
        assert_one_answer_per_event(&history, &concurrent, &context);

        assert_same(
            &snapshot(&databases.one_by_one).await.settled(),
            &snapshot(&databases.other).await.settled(),
            ["one by one", "concurrent"],
            &context,
        );
        assert_consistent(&databases.one_by_one).await;
        assert_consistent(&databases.other).await;
        assert_settles(&databases.one_by_one, &history, &context).await;
        assert_settles(&databases.other, &history, &context).await;
    }
    databases.remove().await;
}

/// Keeps the generator honest: fifty histories of each variant, applied one
/// by one, answer every outcome; exact histories hold races and concurrent
/// ones none. Prints how often each event type got each outcome
/// (`--nocapture`).
#[sqlx::test]
async fn fifty_generated_histories_of_each_variant_meet_every_outcome(pool: PgPool) {
    const ALL: [Outcome; 6] = [
        Outcome::Processed,
        Outcome::Ignored,
        Outcome::Superseded,
        Outcome::Deferred,
        Outcome::Rejected,
        Outcome::Duplicate,
    ];
    for variant in [Variant::Exact, Variant::Concurrent] {
        let (mut runner, _) = runner(5);
        let mut histogram: BTreeMap<(String, &str), usize> = BTreeMap::new();
        let mut details: BTreeMap<&str, usize> = BTreeMap::new();
        let mut raced = 0;
        for case in 0..50 {
            let history = history(variant).new_tree(&mut runner).unwrap().current();
            let context = format!("{variant:?} history {case}:\n{history:?}");
            let length = history.events.len();
            assert!((10..=MAX_EVENTS).contains(&length), "{context}");
            let races = history.races();
            match variant {
                Variant::Exact => raced += usize::from(!races.is_empty()),
                Variant::Concurrent => assert!(races.is_empty(), "{context}\n{races:#?}"),
            }
            empty(&pool).await;
            let outcomes = one_event_per_transaction(&pool, &history, &context).await;
            for (event, outcome) in history.events.iter().zip(outcomes) {
                let kind = format!("{} {}", event.provider(), event.event_type());
                *histogram.entry((kind, outcome.as_str())).or_default() += 1;
            }
            for event in snapshot(&pool).await.events {
                let detail = &event.detail;
                for (feature, found) in [
                    (
                        "applied later by its credit",
                        !detail["applied_by"].is_null(),
                    ),
                    ("refused by the database", !detail["sqlstate"].is_null()),
                    (
                        "credit owned by another event",
                        detail["reason"] == "this payment was already credited",
                    ),
                    (
                        "smaller cumulative refund",
                        detail["reason"] == "a larger refund of this charge was already debited",
                    ),
                    (
                        "applied later by its owner",
                        event.event_type == "payment_intent.succeeded"
                            && !detail["applied_by"].is_null(),
                    ),
                    (
                        "the payment of an invoice",
                        detail["reason"].as_str().is_some_and(|reason| {
                            reason.starts_with("the payment pays an invoice")
                        }),
                    ),
                    ("conflicting owner", !detail["owner_conflict"].is_null()),
                ] {
                    *details.entry(feature).or_default() += usize::from(found);
                }
            }
            assert_consistent(&pool).await;
        }
        println!("{variant:?} histories: outcomes by event type");
        for ((kind, outcome), count) in &histogram {
            println!("  {kind:<45} {outcome:<10} {count:>4}");
        }
        println!("  {details:?}; histories with races: {raced}");
        for outcome in ALL {
            assert!(
                histogram.keys().any(|(_, o)| *o == outcome.as_str()),
                "no {variant:?} history answered {outcome:?}"
            );
        }
        for feature in [
            "applied later by its credit",
            "applied later by its owner",
            "the payment of an invoice",
        ] {
            assert!(details[feature] > 0, "no {variant:?} history had {feature}");
        }
        for kind in [
            "checkout.session.completed",
            "checkout.session.async_payment_succeeded",
            "checkout.session.async_payment_failed",
            "invoice_payment.paid",
        ] {
            assert!(
                histogram
                    .keys()
                    .any(|(k, o)| k.ends_with(kind) && *o == "processed"),
                "no {variant:?} history processed a {kind}"
            );
        }
        if variant == Variant::Exact {
            assert_eq!(
                raced, 50,
                "every exact history has two credits of one payment"
            );
            for feature in [
                "refused by the database",
                "credit owned by another event",
                "smaller cumulative refund",
                "conflicting owner",
            ] {
                assert!(details[feature] > 0, "no exact history had a {feature}");
            }
        }
    }
}

#[test]
fn a_seed_always_generates_the_same_histories() {
    let bodies = |variant| {
        let (mut runner, _) = runner(5);
        (0..5)
            .map(|_| history(variant).new_tree(&mut runner).unwrap().current())
            .flat_map(|history| history.events)
            .map(|event| (event.event_id().to_owned(), event.raw().clone()))
            .collect::<Vec<_>>()
    };
    for variant in [Variant::Exact, Variant::Concurrent] {
        assert_eq!(bodies(variant), bodies(variant), "{variant:?}");
    }
}

/// The property's pair of databases: the test's own, where events are
/// applied one by one, and `other`, created beside it.
struct Databases {
    one_by_one: PgPool,
    other: PgPool,
    other_name: String,
}

impl Databases {
    /// `pool` (migrated) and a second database, migrated, whose serial ids
    /// start far from the first one's, so that no comparison can rest on
    /// them.
    async fn beside(pool: PgPool) -> Self {
        let name: String = sqlx::query_scalar("select current_database()")
            .fetch_one(&pool)
            .await
            .unwrap();
        // Within Postgres' 63 bytes (sqlx's own names take them all).
        let other_name = format!("{}_other", &name[..name.len().min(57)]);
        let quoted = format!("\"{other_name}\"");
        sqlx::raw_sql(&format!("drop database if exists {quoted} with (force)"))
            .execute(&pool)
            .await
            .unwrap();
        sqlx::raw_sql(&format!("create database {quoted}"))
            .execute(&pool)
            .await
            .unwrap();
        let options = (*pool.connect_options()).clone().database(&other_name);
        let other = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .unwrap();
        webhookd::db::MIGRATOR.run(&other).await.unwrap();
        sqlx::raw_sql(
            "alter table wallet_entries alter column id restart with 1000001;
             alter sequence outbox_row_id restart with 2000001",
        )
        .execute(&other)
        .await
        .unwrap();
        Databases {
            one_by_one: pool,
            other,
            other_name,
        }
    }

    async fn empty(&self) {
        empty(&self.one_by_one).await;
        empty(&self.other).await;
    }

    fn context(&self, case: usize, seed: u64, settings: &str, history: &History) -> String {
        format!(
            "case {case} (seed {seed}), {settings}, database {}; the history in arrival order:\n{history:?}",
            self.other_name
        )
    }

    /// Drops the second database (a failed case leaves it for a look).
    async fn remove(self) {
        self.other.close().await;
        let quoted = format!("\"{}\"", self.other_name);
        sqlx::raw_sql(&format!("drop database {quoted} with (force)"))
            .execute(&self.one_by_one)
            .await
            .unwrap();
    }
}

/// Deletes every row ingest writes.
async fn empty(pool: &PgPool) {
    sqlx::raw_sql(
        "delete from deferred_events; delete from wallet_entries; delete from wallets;
         delete from outbox; delete from payments; delete from subscriptions;
         delete from owners; delete from invoices; delete from invoice_payments;
         delete from processed_events",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// A runner seeded by `PROPERTY_SEED` (else `default_seed`), and the seed.
fn runner(default_seed: u64) -> (TestRunner, u64) {
    let seed = env_or("PROPERTY_SEED", default_seed);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    (TestRunner::new_with_rng(Config::default(), rng), seed)
}

fn cases(default: u64) -> usize {
    env_or("PROPERTY_CASES", default) as usize
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Consecutive slices of `events`, of the given sizes (the last one shorter).
fn batches<'a>(events: &'a [Event], sizes: &[usize]) -> Vec<&'a [Event]> {
    let mut rest = events;
    let mut batches = Vec::new();
    for &size in sizes {
        if rest.is_empty() {
            break;
        }
        let (batch, tail) = rest.split_at(size.min(rest.len()));
        batches.push(batch);
        rest = tail;
    }
    assert!(rest.is_empty(), "sizes for every event");
    batches
}

/// (a): each event in its own transaction, in arrival order.
async fn one_event_per_transaction(
    pool: &PgPool,
    history: &History,
    context: &str,
) -> Vec<Outcome> {
    let mut outcomes = Vec::with_capacity(history.events.len());
    for event in &history.events {
        let answer = ingest::ingest(pool, event).await.map_err(|e| e.to_string());
        outcomes.push(outcome(event, answer, context));
    }
    outcomes
}

fn outcome(event: &Event, answer: Result<Receipt, String>, context: &str) -> Outcome {
    match answer {
        Ok(receipt) => {
            assert_eq!(receipt.event_id, event.event_id(), "{context}");
            receipt.outcome
        }
        Err(error) => panic!("{context}\n{} failed: {error}", event.event_id()),
    }
}

fn assert_same_outcomes(history: &History, [left, right]: [&[Outcome]; 2], context: &str) {
    let differing: Vec<String> = history
        .events
        .iter()
        .zip(left.iter().zip(right))
        .enumerate()
        .filter(|(_, (_, (left, right)))| left != right)
        .map(|(position, (event, (left, right)))| {
            format!(
                "  {position} {}: {left:?} one by one, {right:?} batched",
                event.event_id()
            )
        })
        .collect();
    assert!(
        differing.is_empty(),
        "{context}\noutcomes differ:\n{}",
        differing.join("\n")
    );
}

/// Every event id got exactly one answer other than `duplicate`.
fn assert_one_answer_per_event(history: &History, outcomes: &[Outcome], context: &str) {
    let mut answered: HashMap<(&str, &str), usize> = HashMap::new();
    for (event, outcome) in history.events.iter().zip(outcomes) {
        let count = answered
            .entry((event.provider(), event.event_id()))
            .or_default();
        *count += usize::from(*outcome != Outcome::Duplicate);
    }
    let wrong: Vec<_> = answered.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        wrong.is_empty(),
        "{context}\nanswers other than duplicate per event: {wrong:?}\n{outcomes:?}"
    );
}
