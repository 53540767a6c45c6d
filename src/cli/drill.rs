//! `webhookd drill`: a load and correctness drill users can point at their
//! own deployment. It signs N unique `payment_intent.succeeded` events, sends
//! each K times at once (a retry storm), keeps C events in flight, retries
//! non-2xx answers and connection errors like a provider, and then, given
//! `DATABASE_URL`, checks the books: one event row per unique event, wallet
//! totals equal to the sum of the unique amounts, balances equal to their
//! entries, one outbox row per credit. Prints one JSON line.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use secrecy::ExposeSecret;
use serde_json::json;
use sqlx::PgPool;

use crate::config::DrillArgs;
use crate::providers::stripe;

/// Wallets the events spread over: enough to run in parallel, few enough to
/// contend like real users.
const USERS: u64 = 16;

#[derive(Debug, Default)]
struct Tally {
    statuses: BTreeMap<String, u64>,
    latencies: Vec<Duration>,
    failed: u64,
}

/// Runs the drill; `Ok(false)` when verification failed.
pub async fn run(
    args: &DrillArgs,
    pool: Option<&PgPool>,
    out: &mut impl std::io::Write,
) -> anyhow::Result<bool> {
    let secret = args
        .stripe_webhook_secret
        .iter()
        .next()
        .map(|s| s.expose_secret().to_owned())
        .ok_or_else(|| {
            anyhow::anyhow!("set STRIPE_WEBHOOK_SECRET (the secret the target verifies with)")
        })?;
    let run_id = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let url = format!("{}/webhooks/stripe", args.url.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(
            usize::try_from(args.concurrency * args.duplicates).unwrap_or(usize::MAX),
        )
        .build()?;

    let started = Instant::now();
    let sends = futures_util::stream::iter(0..args.events)
        .map(|n| {
            let (client, url, secret) = (&client, &url, &secret);
            async move {
                let body = event(run_id, n);
                let copies = (0..args.duplicates)
                    .map(|_| send(client, url, secret, &body, args.give_up_after));
                futures_util::future::join_all(copies).await
            }
        })
        .buffer_unordered(usize::try_from(args.concurrency).unwrap_or(usize::MAX));
    let mut tally = Tally::default();
    let mut sends = Box::pin(sends);
    while let Some(copies) = sends.next().await {
        for (attempts, done) in copies {
            for (status, latency) in attempts {
                *tally.statuses.entry(status).or_default() += 1;
                tally.latencies.push(latency);
            }
            if !done {
                tally.failed += 1;
            }
        }
    }
    let elapsed = started.elapsed();

    let verification = match pool {
        Some(pool) => Some(verify(pool, run_id, args.events).await?),
        None => None,
    };
    let passed = tally.failed == 0 && verification.as_ref().is_none_or(|v| v["passed"] == true);
    tally.latencies.sort_unstable();
    let percentile = |p: f64| {
        let len = tally.latencies.len();
        if len == 0 {
            return 0.0;
        }
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let index = ((len as f64 * p).ceil() as usize).clamp(1, len) - 1;
        tally.latencies[index].as_secs_f64() * 1000.0
    };
    #[allow(clippy::cast_precision_loss)]
    let unique_per_sec = args.events as f64 / elapsed.as_secs_f64();
    let report = json!({
        "run": run_id.to_string(),
        "events": args.events,
        "duplicates": args.duplicates,
        "concurrency": args.concurrency,
        "sent": tally.latencies.len(),
        "statuses": tally.statuses,
        "gave_up": tally.failed,
        "seconds": elapsed.as_secs_f64(),
        "unique_events_per_sec": unique_per_sec,
        "latency_ms": { "p50": percentile(0.50), "p90": percentile(0.90), "p99": percentile(0.99), "max": percentile(1.0) },
        "verification": verification,
        "passed": passed,
    });
    writeln!(out, "{report}")?;
    Ok(passed)
}

/// Unique event `n` of drill `run_id`, for one of [`USERS`] wallets.
fn event(run_id: u128, n: u64) -> String {
    json!({
        "id": format!("evt_drill_{run_id}_{n}"),
        "object": "event",
        "type": "payment_intent.succeeded",
        "created": SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "data": { "object": {
            "id": format!("pi_drill_{run_id}_{n}"),
            "object": "payment_intent",
            "amount": amount(n),
            "amount_received": amount(n),
            "currency": "usd",
            "metadata": { "user_id": format!("drill_{run_id}_{}", n % USERS) },
        }},
        "livemode": false,
    })
    .to_string()
}

fn amount(n: u64) -> u64 {
    100 + n % 100
}

/// Sends one copy until it is answered 2xx (re-signed on every try, as a
/// provider does) or `give_up_after` passes. Returns each try's status and
/// latency, and whether it succeeded.
async fn send(
    client: &reqwest::Client,
    url: &str,
    secret: &str,
    body: &str,
    give_up_after: Duration,
) -> (Vec<(String, Duration)>, bool) {
    let first = Instant::now();
    let mut tries = Vec::new();
    let mut backoff = Duration::from_millis(20);
    loop {
        let t = i64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        )
        .unwrap_or(0);
        let started = Instant::now();
        let result = client
            .post(url)
            .header(
                stripe::SIGNATURE_HEADER,
                stripe::signature_header(secret, t, body.as_bytes()),
            )
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await;
        let status = match &result {
            Ok(response) => response.status().as_u16().to_string(),
            Err(_) => "error".to_owned(),
        };
        tries.push((status, started.elapsed()));
        if result.is_ok_and(|r| r.status().is_success()) {
            return (tries, true);
        }
        if first.elapsed() >= give_up_after {
            return (tries, false);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// The books after the drill: exactly-once effects for this run's events.
async fn verify(pool: &PgPool, run_id: u128, events: u64) -> anyhow::Result<serde_json::Value> {
    let prefix = format!("drill_{run_id}_");
    let expected_total: u64 = (0..events).map(amount).sum();
    let counts = crate::ledger::drill_counts(pool, &prefix).await?;
    let mut conn = pool.acquire().await?;
    let mismatches = crate::ledger::mismatches(&mut conn).await?;
    let drill_mismatches = mismatches
        .iter()
        .filter(|m| m.user_id.starts_with(&prefix))
        .count();
    let passed = counts.events == i64::try_from(events)?
        && counts.entries == i64::try_from(events)?
        && counts.outbox == i64::try_from(events)?
        && counts.balance_total == i64::try_from(expected_total)?
        && drill_mismatches == 0;
    Ok(json!({
        "event_rows": counts.events,
        "entries": counts.entries,
        "outbox_rows": counts.outbox,
        "wallet_total_minor": counts.balance_total,
        "expected_total_minor": expected_total,
        "balance_mismatches": drill_mismatches,
        "passed": passed,
    }))
}
