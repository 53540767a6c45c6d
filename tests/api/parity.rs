//! The parity property's machinery: random histories over every provider
//! and event kind ([`history`]), and every business table read into rows
//! two databases can be compared by ([`snapshot`]). The generator is kept
//! honest here: what its histories meet when applied, and that a seed
//! always builds the same events.

mod bodies;
mod history;
mod plan;
mod snapshot;

use std::collections::BTreeMap;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use sqlx::PgPool;
use webhookd::effects::Outcome;
use webhookd::ingest::{self, Receipt};
use webhookd::providers::VerifiedEvent;

use crate::helpers::assert_consistent;
use history::{History, MAX_EVENTS, Variant, history};
use snapshot::snapshot;

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
        assert!(details["applied later by its credit"] > 0, "{variant:?}");
        if variant == Variant::Exact {
            assert_eq!(
                raced, 50,
                "every exact history has two credits of one payment"
            );
            for feature in [
                "refused by the database",
                "credit owned by another event",
                "smaller cumulative refund",
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

/// Deletes every row ingest writes.
async fn empty(pool: &PgPool) {
    sqlx::raw_sql(
        "delete from deferred_events; delete from wallet_entries; delete from wallets;
         delete from outbox; delete from payments; delete from subscriptions;
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

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Each event in its own transaction, in arrival order.
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

fn outcome(event: &VerifiedEvent, answer: Result<Receipt, String>, context: &str) -> Outcome {
    match answer {
        Ok(receipt) => {
            assert_eq!(receipt.event_id, event.event_id(), "{context}");
            receipt.outcome
        }
        Err(error) => panic!("{context}\n{} failed: {error}", event.event_id()),
    }
}
