//! `webhookd drill`: a load and correctness drill users can point at their
//! own deployment. It signs N unique events (Stripe credits spread over
//! `--users` wallets, or with `--mix` a mix of Stripe and Razorpay events:
//! see [`plan`]), sends each K times at once (a retry storm), keeps C events
//! in flight, retries non-2xx answers and connection errors like a provider,
//! and then, given `DATABASE_URL`, checks the books ([`verify`]): one event
//! row per unique event, wallet totals equal to the credits less the
//! refunds, balances equal to their entries, the outbox rows each event
//! writes. Prints one JSON line.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use futures_util::StreamExt;
use secrecy::ExposeSecret;
use serde_json::json;
use sqlx::PgPool;

use crate::providers::{razorpay, stripe};
use crate::secrets::{Secrets, parse_secrets};

mod plan;
mod verify;
pub use plan::{Kind, Plan, Shape};
pub use verify::verify;

/// How much to send, how, and what to sign it with.
#[derive(Debug, Clone, Args)]
pub struct DrillArgs {
    /// Unique events to send (at most, with `--duration`).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub events: u64,
    /// Copies of each event, fired at the same moment (a retry storm).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub duplicates: u64,
    /// Events in flight at once (each with all its copies).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub concurrency: u64,
    /// Wallets the credits spread over.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub users: u64,
    /// A realistic mix instead of credits only: 50% Stripe
    /// `payment_intent.succeeded`, 10% `charge.succeeded`, 10%
    /// `charge.refunded` (of a credit of the run, sometimes before it), 10%
    /// `customer.subscription.updated`, 20% Razorpay `payment.captured`
    /// (needs RAZORPAY_WEBHOOK_SECRET).
    #[arg(long, conflicts_with = "checkout")]
    pub mix: bool,
    /// Stripe Checkout payments instead of credits only: in each ten
    /// events, three payments as Checkout delivers them
    /// (`checkout.session.completed` naming the owner in
    /// `client_reference_id`, `payment_intent.succeeded` without metadata,
    /// `charge.succeeded`; in every other ten the intent first, waiting for
    /// its session) and one plain credit.
    #[arg(long)]
    pub checkout: bool,
    /// Stop starting new events after this long (e.g. `15s`); the run is
    /// verified over what was sent.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Base URL of the webhookd under test. Repeat it to spread each event's
    /// copies over several servers (of one database).
    #[arg(long = "url", default_value = "http://127.0.0.1:8080")]
    pub urls: Vec<String>,
    /// Give up on a request after this long of retrying.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "120s")]
    pub give_up_after: Duration,
    /// The run's id, in every id it sends (events `evt_drill_{run}_n`,
    /// wallets `drill_{run}_u`); default: now, in milliseconds. For a target
    /// whose wallets must exist beforehand (scripts/bench.sh's Node handler).
    #[arg(long)]
    pub run_id: Option<u64>,
    #[arg(long, env = "STRIPE_WEBHOOK_SECRET", hide_env_values = true, value_parser = parse_secrets, default_value = "")]
    pub stripe_webhook_secret: Secrets,
    #[arg(long, env = "RAZORPAY_WEBHOOK_SECRET", hide_env_values = true, value_parser = parse_secrets, default_value = "")]
    pub razorpay_webhook_secret: Secrets,
}

#[derive(Debug, Default)]
struct Tally {
    statuses: BTreeMap<String, u64>,
    /// The `outcome` of each 2xx answer.
    outcomes: BTreeMap<String, u64>,
    /// Per kind of event: unique events sent, and their answers' outcomes.
    kinds: BTreeMap<Kind, (u64, BTreeMap<String, u64>)>,
    latencies: Vec<Duration>,
    failed: u64,
    /// Unique events sent.
    sent: u64,
}

impl Tally {
    /// Counts one unique event of `kind`, sent as `copies`.
    fn add(&mut self, kind: Kind, copies: Vec<Sent>) {
        self.sent += 1;
        let (events, outcomes) = self.kinds.entry(kind).or_default();
        *events += 1;
        for sent in copies {
            for (status, latency) in sent.tries {
                *self.statuses.entry(status).or_default() += 1;
                self.latencies.push(latency);
            }
            match sent.outcome {
                Some(outcome) => {
                    *outcomes.entry(outcome.clone()).or_default() += 1;
                    *self.outcomes.entry(outcome).or_default() += 1;
                }
                None => self.failed += 1,
            }
        }
    }
}

/// One copy's tries: each try's status and latency, and the final 2xx
/// answer's outcome (`None`: never answered 2xx).
struct Sent {
    tries: Vec<(String, Duration)>,
    outcome: Option<String>,
}

/// The secrets the drill signs with, as the target verifies them.
struct Signer {
    stripe: String,
    razorpay: Option<String>,
}

impl Signer {
    fn new(args: &DrillArgs) -> anyhow::Result<Self> {
        let first = |secrets: &Secrets| secrets.iter().next().map(|s| s.expose_secret().to_owned());
        let stripe = first(&args.stripe_webhook_secret).ok_or_else(|| {
            anyhow::anyhow!("set STRIPE_WEBHOOK_SECRET (the secret the target verifies with)")
        })?;
        let razorpay = first(&args.razorpay_webhook_secret);
        anyhow::ensure!(
            !args.mix || razorpay.is_some(),
            "--mix sends Razorpay events: set RAZORPAY_WEBHOOK_SECRET (the secret the target verifies with)"
        );
        Ok(Signer { stripe, razorpay })
    }

    /// The signature headers of one try, signed now (as a provider does).
    fn headers(&self, delivery: &plan::Delivery) -> Vec<(&'static str, String)> {
        let body = delivery.body.as_bytes();
        match (delivery.kind.provider(), &self.razorpay) {
            (razorpay::PROVIDER, Some(secret)) => vec![
                (
                    razorpay::SIGNATURE_HEADER,
                    razorpay::signature(secret, body),
                ),
                (razorpay::EVENT_ID_HEADER, delivery.event_id.clone()),
            ],
            _ => {
                let t = i64::try_from(unix_now().as_secs()).unwrap_or(0);
                vec![(
                    stripe::SIGNATURE_HEADER,
                    stripe::signature_header(&self.stripe, t, body),
                )]
            }
        }
    }
}

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Runs the drill; `Ok(false)` when verification failed.
pub async fn run(
    args: &DrillArgs,
    pool: Option<&PgPool>,
    out: &mut impl std::io::Write,
) -> anyhow::Result<bool> {
    let signer = Signer::new(args)?;
    let plan = Plan {
        run_id: args
            .run_id
            .map_or_else(|| unix_now().as_millis(), u128::from),
        events: args.events,
        users: args.users,
        shape: match (args.mix, args.checkout) {
            (true, _) => Shape::Mix,
            (_, true) => Shape::Checkout,
            _ => Shape::Credits,
        },
    };
    let bases: Vec<&str> = args
        .urls
        .iter()
        .map(|url| url.trim_end_matches('/'))
        .collect();
    let client = client(args)?;

    let started = Instant::now();
    let tally = fire(args, &plan, &signer, &client, &bases, started).await;
    let elapsed = started.elapsed();

    let verification = match pool {
        Some(pool) => Some(verify(pool, &plan, tally.sent).await?),
        None => None,
    };
    let passed = passed(&tally, verification.as_ref());
    writeln!(
        out,
        "{}",
        report(args, &plan, tally, elapsed, verification, passed)
    )?;
    Ok(passed)
}

/// One client for every request, keeping a connection open for each copy
/// that can be in flight.
fn client(args: &DrillArgs) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(
            usize::try_from(args.concurrency * args.duplicates).unwrap_or(usize::MAX),
        )
        .build()
}

/// Sends the plan's events, `--concurrency` at a time, each with all its
/// copies at once, and tallies the answers. With a duration, new events
/// start until it is over, and only whole groups of the mix are sent.
async fn fire(
    args: &DrillArgs,
    plan: &Plan,
    signer: &Signer,
    client: &reqwest::Client,
    bases: &[&str],
    started: Instant,
) -> Tally {
    let deadline = args.duration.map(|d| started + d);
    let group = plan.group();
    let sends = futures_util::stream::iter(0..args.events)
        .take_while(move |n| {
            let open = n % group != 0 || deadline.is_none_or(|d| Instant::now() < d);
            std::future::ready(open)
        })
        .map(|n| async move {
            let delivery = plan.delivery(n);
            // Copy `c` of event `n` goes to server `(n + c) % servers`.
            let copies = (0..args.duplicates).map(|c| {
                let base = bases[usize::try_from(n + c).unwrap_or(0) % bases.len()];
                let url = format!("{base}/webhooks/{}", delivery.kind.provider());
                let delivery = &delivery;
                async move { send(client, &url, signer, delivery, args.give_up_after).await }
            });
            (delivery.kind, futures_util::future::join_all(copies).await)
        })
        .buffer_unordered(usize::try_from(args.concurrency).unwrap_or(usize::MAX));
    let mut tally = Tally::default();
    let mut sends = Box::pin(sends);
    while let Some((kind, copies)) = sends.next().await {
        tally.add(kind, copies);
    }
    tally
}

/// With a database the books decide; without one, each event must have
/// been applied exactly once by the answers (the rest duplicates).
fn passed(tally: &Tally, verification: Option<&serde_json::Value>) -> bool {
    tally.failed == 0
        && match verification {
            Some(verification) => verification["passed"] == true,
            None => tally.kinds.iter().all(|(kind, (events, outcomes))| {
                let first = |outcome: &str| outcomes.get(outcome).copied().unwrap_or(0);
                let applied: u64 = match kind {
                    // Stripe's charge event credits nothing: the credit is the intent's.
                    Kind::Charge => first("processed") + first("ignored"),
                    Kind::Refund => first("processed") + first("deferred"),
                    // Credited by itself, by its session first, or waiting
                    // for its session to name the owner.
                    Kind::Paid => first("processed") + first("ignored") + first("deferred"),
                    _ => first("processed"),
                };
                applied == *events
            }),
        }
}

fn report(
    args: &DrillArgs,
    plan: &Plan,
    mut tally: Tally,
    elapsed: Duration,
    verification: Option<serde_json::Value>,
    passed: bool,
) -> serde_json::Value {
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
    let unique_per_sec = tally.sent as f64 / elapsed.as_secs_f64();
    let kinds: serde_json::Map<String, serde_json::Value> = tally
        .kinds
        .iter()
        .map(|(kind, (events, outcomes))| {
            let counts = json!({ "events": events, "outcomes": outcomes });
            (kind.label().to_owned(), counts)
        })
        .collect();
    json!({
        "run": plan.run_id.to_string(),
        "events": tally.sent,
        "duplicates": args.duplicates,
        "concurrency": args.concurrency,
        "users": plan.users,
        "mix": plan.shape == Shape::Mix,
        "shape": plan.shape.as_str(),
        "sent": tally.latencies.len(),
        "statuses": tally.statuses,
        "outcomes": tally.outcomes,
        "kinds": kinds,
        "gave_up": tally.failed,
        "seconds": elapsed.as_secs_f64(),
        "unique_events_per_sec": unique_per_sec,
        "latency_ms": { "p50": percentile(0.50), "p90": percentile(0.90), "p99": percentile(0.99), "max": percentile(1.0) },
        "verification": verification,
        "passed": passed,
    })
}

/// Sends one copy until it is answered 2xx (re-signed on every try, as a
/// provider does), retrying 408, 429, 5xx and connection errors with jittered
/// backoff (honouring a short `Retry-After`) for at most `give_up_after`; any
/// other 4xx is final.
async fn send(
    client: &reqwest::Client,
    url: &str,
    signer: &Signer,
    delivery: &plan::Delivery,
    give_up_after: Duration,
) -> Sent {
    let first = Instant::now();
    let mut tries = Vec::new();
    let mut backoff = Duration::from_millis(20);
    for attempt in 0_i32.. {
        let mut request = client
            .post(url)
            .header("content-type", "application/json")
            .body(delivery.body.clone());
        for (name, value) in signer.headers(delivery) {
            request = request.header(name, value);
        }
        let started = Instant::now();
        let result = request.send().await;
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
