//! Property: a Stripe history (a credit, its charge, two cumulative refunds,
//! four subscription updates) split between webhooks and sweeps in any way
//! (an event delivered before the sweep, after it, both, never, or at the
//! same moment as the sweep applies it) ends in the state of delivering
//! everything once.
//!
//! Cases come from a fixed seed (`PROPERTY_CASES`, `PROPERTY_SEED`); a
//! failure prints the split.

use futures_util::future::join_all;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use reqwest::StatusCode;
use serde_json::Value;
use sqlx::PgPool;
use webhookd::cli::sweep::{StripeSweepArgs, SweepCommand};
use webhookd::clock::Clock;
use webhookd::config::StripeApiArgs;

use crate::effects::properties::{AMOUNT, Provider, REFUNDS, state, stripe_history};
use crate::fakes::stripe::FakeStripe;
use crate::helpers::{TestApp, now, spawn_app};

const KEY: &str = "rk_test_split";

/// How one event reaches webhookd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Split {
    /// Its webhook arrives before the sweep.
    Before,
    /// After the sweep (a late retry).
    After,
    /// Both before and after.
    Both,
    /// Never: only the sweep finds it.
    SweepOnly,
    /// At the same moment as the sweep.
    During,
}

fn split() -> impl Strategy<Value = Split> {
    prop_oneof![
        Just(Split::Before),
        Just(Split::After),
        Just(Split::Both),
        Just(Split::SweepOnly),
        Just(Split::During),
    ]
}

async fn webhooks(app: &TestApp, bodies: Vec<&String>) {
    let statuses = join_all(bodies.into_iter().map(|body| app.post_stripe(body))).await;
    for response in statuses {
        assert_eq!(response.status(), StatusCode::OK);
    }
}

async fn sweep(app: &TestApp, fake: &FakeStripe) -> Value {
    let command = SweepCommand::Stripe(StripeSweepArgs {
        since: std::time::Duration::from_secs(3 * 3600),
        dry_run: false,
        account: None,
        api: StripeApiArgs {
            stripe_api_key: Some(KEY.into()),
            stripe_api_base: fake.base_url(),
            rate: 100,
            stripe_refresh_on_tie: None,
            scope: Default::default(),
        },
    });
    let mut out = Vec::new();
    webhookd::cli::sweep::sweep(&app.pool, &command, &[], &Clock::System, &mut out)
        .await
        .unwrap();
    serde_json::from_slice(&out).unwrap()
}

#[sqlx::test]
async fn any_split_of_a_history_between_webhooks_and_sweeps_ends_in_the_delivered_once_state(
    pool: PgPool,
) {
    let app = spawn_app(pool).await;
    let cases: usize = std::env::var("PROPERTY_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(16);
    let seed: u64 = std::env::var("PROPERTY_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let expected = (
        Some(AMOUNT - REFUNDS[1]),
        "partially_refunded".to_owned(),
        REFUNDS[1],
        "canceled".to_owned(),
        8,
        0,
    );
    let t0 = now() - 1000;
    for case in 0..cases {
        let history = stripe_history(case, t0);
        let splits = proptest::collection::vec(split(), history.len())
            .new_tree(&mut runner)
            .unwrap()
            .current();
        // The provider's API holds every event, whatever was delivered.
        let listed: Vec<Value> = history
            .iter()
            .map(|(_, body)| serde_json::from_str(body).unwrap())
            .collect();
        let fake = FakeStripe::start(KEY, listed).await;
        let bodies = |wanted: &[Split]| -> Vec<&String> {
            history
                .iter()
                .zip(&splits)
                .filter(|(_, split)| wanted.contains(split))
                .map(|((_, body), _)| body)
                .collect()
        };
        webhooks(&app, bodies(&[Split::Before, Split::Both])).await;
        let (summary, ()) =
            tokio::join!(sweep(&app, &fake), webhooks(&app, bodies(&[Split::During])));
        webhooks(&app, bodies(&[Split::After, Split::Both])).await;

        let never_delivered_before = splits
            .iter()
            .filter(|s| matches!(s, Split::SweepOnly | Split::After))
            .count();
        // Recorded by the sweep: applied, or (a charge whose credit its
        // payment intent brought) recorded without an effect.
        let recorded: u64 = ["recovered", "ignored", "deferred"]
            .iter()
            .map(|count| summary[count].as_u64().unwrap())
            .sum();
        assert!(
            recorded as usize >= never_delivered_before && summary["listed"] == history.len(),
            "case {case}, splits {splits:?}: {summary}"
        );
        assert_eq!(
            state(&app, Provider::Stripe, case).await,
            expected,
            "case {case} (seed {seed}), splits {splits:?}"
        );
    }
    app.assert_consistent().await;
}
