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
    /// The `outcome` of each 2xx answer.
    outcomes: BTreeMap<String, u64>,
    latencies: Vec<Duration>,
    failed: u64,
}

/// One copy's tries: each try's status and latency, and the final 2xx
/// answer's outcome (`None`: never answered 2xx).
struct Sent {
    tries: Vec<(String, Duration)>,
    outcome: Option<String>,
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
    let urls: Vec<String> = args
        .urls
        .iter()
        .map(|url| format!("{}/webhooks/stripe", url.trim_end_matches('/')))
        .collect();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(
            usize::try_from(args.concurrency * args.duplicates).unwrap_or(usize::MAX),
        )
        .build()?;

    let started = Instant::now();
    let sends = futures_util::stream::iter(0..args.events)
        .map(|n| {
            let (client, urls, secret) = (&client, &urls, &secret);
            async move {
                let body = event(run_id, n);
                // Copy `c` of event `n` goes to server `(n + c) % servers`.
                let copies = (0..args.duplicates).map(|c| {
                    let url = &urls[usize::try_from(n + c).unwrap_or(0) % urls.len()];
                    send(client, url, secret, &body, args.give_up_after)
                });
                futures_util::future::join_all(copies).await
            }
        })
        .buffer_unordered(usize::try_from(args.concurrency).unwrap_or(usize::MAX));
    let mut tally = Tally::default();
    let mut sends = Box::pin(sends);
    while let Some(copies) = sends.next().await {
        for sent in copies {
            for (status, latency) in sent.tries {
                *tally.statuses.entry(status).or_default() += 1;
                tally.latencies.push(latency);
            }
            match sent.outcome {
                Some(outcome) => *tally.outcomes.entry(outcome).or_default() += 1,
                None => tally.failed += 1,
            }
        }
    }
    let elapsed = started.elapsed();

    let verification = match pool {
        Some(pool) => Some(verify(pool, run_id, args.events).await?),
        None => None,
    };
    // With a database the books decide; without one, each event must have
    // been processed exactly once by the answers (the rest duplicates).
    let processed = tally.outcomes.get("processed").copied().unwrap_or(0);
    let passed = tally.failed == 0
        && match &verification {
            Some(verification) => verification["passed"] == true,
            None => processed == args.events,
        };
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
        "outcomes": tally.outcomes,
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
/// provider does), retrying 408, 429, 5xx and connection errors with jittered
/// backoff (honouring a short `Retry-After`) for at most `give_up_after`; any
/// other 4xx is final.
async fn send(
    client: &reqwest::Client,
    url: &str,
    secret: &str,
    body: &str,
    give_up_after: Duration,
) -> Sent {
    let first = Instant::now();
    let mut tries = Vec::new();
    let mut backoff = Duration::from_millis(20);
    for attempt in 0_i32.. {
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
        let mut wait = backoff;
        match result {
            Ok(response) => {
                let status = response.status();
                tries.push((status.as_u16().to_string(), started.elapsed()));
                if status.is_success() {
                    let answer: serde_json::Value =
                        serde_json::from_slice(&response.bytes().await.unwrap_or_default())
                            .unwrap_or_default();
                    let outcome = answer["outcome"].as_str().unwrap_or("unknown").to_owned();
                    return Sent {
                        tries,
                        outcome: Some(outcome),
                    };
                }
                let retryable = status.is_server_error()
                    || status == reqwest::StatusCode::REQUEST_TIMEOUT
                    || status == reqwest::StatusCode::TOO_MANY_REQUESTS;
                if !retryable {
                    return Sent {
                        tries,
                        outcome: None,
                    };
                }
                if let Some(asked) = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    wait = Duration::from_secs(asked).min(Duration::from_secs(5));
                }
            }
            Err(_) => tries.push(("error".to_owned(), started.elapsed())),
        }
        if first.elapsed() >= give_up_after {
            break;
        }
        let jitter = crate::outbox::retry::jitter(i64::from(attempt), attempt);
        tokio::time::sleep(wait.mul_f64(1.0 + 0.25 * jitter)).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
    Sent {
        tries,
        outcome: None,
    }
}

/// The books after the drill: exactly-once effects for this run's events.
async fn verify(pool: &PgPool, run_id: u128, events: u64) -> anyhow::Result<serde_json::Value> {
    let prefix = format!("drill_{run_id}_");
    let expected_total: u64 = (0..events).map(amount).sum();
    let counts = crate::ledger::drill_counts(pool, &prefix).await?;
    let passed = counts.events == i64::try_from(events)?
        && counts.entries == i64::try_from(events)?
        && counts.outbox == i64::try_from(events)?
        && counts.balance_total == i64::try_from(expected_total)?
        && counts.mismatched_wallets == 0;
    Ok(json!({
        "event_rows": counts.events,
        "entries": counts.entries,
        "outbox_rows": counts.outbox,
        "wallet_total_minor": counts.balance_total,
        "expected_total_minor": expected_total,
        "balance_mismatches": counts.mismatched_wallets,
        "passed": passed,
    }))
}
