//! What the database says of the traffic: when each source last delivered
//! against its usual gap, what waits, what the outbox could not deliver,
//! and what the sweeps found that no webhook brought.

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;

use super::local::bounded;
use super::{Check, Setup, spoken, spoken_secs};
use crate::arrivals::{self, USUAL_GAP_DAYS};
use crate::config::ServeSettings;
use crate::providers::Scheme;
use crate::sweep::Run;
use crate::{events, outbox};

/// How much longer than its usual gap a source may be silent before a
/// warning (the shipped alert's factor), and before a failure.
const WARN_AFTER_GAPS: f64 = 1.5;
const FAIL_AFTER_GAPS: f64 = 3.0;

/// How long a source that delivered in one hour only may be silent before
/// a warning (it has no usual gap to compare with).
const ONE_HOUR_ONLY_SILENCE: i64 = 24 * 3_600;

/// An event waiting for a dependency longer than this is worth a look.
const LONG_WAIT: Duration = Duration::from_secs(3_600);

/// The oldest undelivered outbox row may be this old before a warning.
const OUTBOX_AGE: Duration = Duration::from_secs(15 * 60);

pub(super) async fn checks(setup: &Setup<'_>, pool: &PgPool) -> Vec<Check> {
    let mut checks = deliveries(setup, pool).await;
    checks.push(waiting(pool).await);
    checks.extend(outboxes(pool).await);
    checks.extend(sweeps(setup, pool).await);
    checks
}

/// `deliveries.<source>`: how long since each mounted source's last
/// delivery, against the longest silence of the two weeks before it.
async fn deliveries(setup: &Setup<'_>, pool: &PgPool) -> Vec<Check> {
    let seen = match arrivals::seen(pool).await {
        Ok(seen) => seen,
        Err(error) => {
            return vec![Check::warn(
                "deliveries",
                format!(
                    "could not read when deliveries arrived: {}",
                    bounded(&error.to_string())
                ),
                "check the database (see the database check)",
            )];
        }
    };
    let now = setup.clock.now();
    (setup.sources.iter())
        .map(|source| {
            let check = format!("deliveries.{}", source.name);
            let Some(seen) = seen.iter().find(|s| s.source == source.name) else {
                return Check::warn(check, "no delivery has arrived yet", never(source));
            };
            let age = now - seen.last_at;
            let Some(gap) = seen.usual_gap else {
                let detail = format!(
                    "last delivery {} ago (deliveries in one hour only: too few to know its usual gap)",
                    spoken_secs(age)
                );
                return match age > ONE_HOUR_ONLY_SILENCE {
                    true => Check::warn(check, detail, never(source)),
                    false => Check::ok(check, detail),
                };
            };
            let detail = format!(
                "last delivery {} ago; in the {USUAL_GAP_DAYS} days before it, its longest silence \
                 was {} ({} deliveries)",
                spoken_secs(age),
                spoken_secs(gap),
                seen.deliveries
            );
            #[allow(clippy::cast_precision_loss)]
            let gaps = age as f64 / gap as f64;
            let fix = match source.scheme.provider() {
                Some(provider) => format!(
                    "check endpoint.{} above and the provider's dashboard for failing or disabled \
                     deliveries; once mended, `webhookd sweep {provider} --since {}` applies what \
                     was missed",
                    source.name,
                    since(age)
                ),
                None => format!(
                    "check the sender's webhook settings for /webhooks/{} and its list of failed \
                     deliveries",
                    source.name
                ),
            };
            if gaps > FAIL_AFTER_GAPS {
                Check::fail(
                    check,
                    format!("silent for more than three times its longest silence: {detail}"),
                    fix,
                )
            } else if gaps > WARN_AFTER_GAPS {
                Check::warn(check, format!("silent for longer than usual: {detail}"), fix)
            } else {
                Check::ok(check, detail)
            }
        })
        .collect()
}

/// What to do about a source that never delivered, or hardly.
fn never(source: &crate::providers::Source) -> String {
    let endpoint = match source.scheme {
        Scheme::Stripe | Scheme::Paypal => format!("endpoint.{} above and ", source.name),
        _ => String::new(),
    };
    let trigger = match source.scheme {
        Scheme::Stripe => " (`stripe trigger payment_intent.succeeded`)",
        _ => "",
    };
    format!(
        "if the provider sends to this service, check {endpoint}the provider's list of \
         failed deliveries; to see one arrive, send a test event from its dashboard{trigger}"
    )
}

/// `waiting`: events deferred for a dependency, and payments waiting for
/// their owner.
async fn waiting(pool: &PgPool) -> Check {
    let (deferred, owners) = tokio::join!(events::deferred_depth(pool), events::owner_waits(pool));
    let (Ok((deferred, oldest)), Ok((owner_waits, oldest_owner))) = (deferred, owners) else {
        return Check::warn(
            "waiting",
            "could not read the deferred events",
            "check the database (see the database check)",
        );
    };
    let long = LONG_WAIT.as_secs_f64();
    if owner_waits > 0 && oldest_owner > long {
        return Check::warn(
            "waiting",
            format!(
                "{owner_waits} payment(s) wait for their owner, the oldest for {}: no wallet is \
                 credited until the event that names the owner arrives (after WEBHOOKD_OWNER_WAIT \
                 they are rejected as `no owner`)",
                spoken(Duration::from_secs_f64(oldest_owner))
            ),
            "`webhookd explain <payment id>` shows what each waits for; put the user id in the \
             payment's metadata (metadata.user_id), or in the Checkout Session's \
             client_reference_id, or see WEBHOOKD_SOURCE_<NAME>_OWNER",
        );
    }
    if deferred > 0 && oldest > long {
        return Check::warn(
            "waiting",
            format!(
                "{deferred} event(s) wait for another, the oldest for {}",
                spoken(Duration::from_secs_f64(oldest))
            ),
            "the console's events page (outcome deferred) and `webhookd explain <event id>` show \
             what each waits for; a sweep (`webhookd sweep <provider> --since 72h`) brings what never arrived",
        );
    }
    match deferred {
        0 => Check::ok("waiting", "no event waits"),
        n => Check::ok(
            "waiting",
            format!(
                "{n} event(s) wait, the oldest for {}",
                spoken(Duration::from_secs_f64(oldest))
            ),
        ),
    }
}

/// `outbox.<sink>`: dead letters, and how old the oldest waiting row is.
async fn outboxes(pool: &PgPool) -> Vec<Check> {
    let by_sink = match outbox::depth_by_sink(pool).await {
        Ok(by_sink) => by_sink,
        Err(error) => {
            return vec![Check::warn(
                "outbox",
                format!("could not read the outbox: {}", bounded(&error.to_string())),
                "check the database (see the database check)",
            )];
        }
    };
    (by_sink.into_iter())
        .map(|(sink, depth)| {
            let check = format!("outbox.{sink}");
            let age = Duration::from_secs_f64(depth.oldest_pending_secs.max(0.0));
            let waiting = match (depth.pending, depth.dead) {
                (0, 0) => "nothing waits, none dead".to_owned(),
                (0, dead) => format!("nothing waits; {dead} dead"),
                (pending, dead) => format!(
                    "{pending} row(s) waiting, the oldest for {}; {dead} dead",
                    spoken(age)
                ),
            };
            if depth.dead > 0 {
                Check::fail(
                    check,
                    format!("{} row(s) gave up after every attempt: {waiting}", depth.dead),
                    format!(
                        "`webhookd outbox list --dead --sink {sink}` shows why; once the receiver \
                         is mended, `webhookd outbox retry --all-dead --sink {sink}`"
                    ),
                )
            } else if depth.pending > 0 && age > OUTBOX_AGE {
                Check::warn(
                    check,
                    waiting,
                    format!("see sink.{sink} above: the receiver is down or slow, or no process drains (WEBHOOKD_ROLE)"),
                )
            } else {
                Check::ok(check, waiting)
            }
        })
        .collect()
}

/// `sweep.<provider>`: for each provider a source of which is mounted,
/// whether it is swept, when it last was, and whether that found events no
/// webhook brought.
async fn sweeps(setup: &Setup<'_>, pool: &PgPool) -> Vec<Check> {
    let runs = crate::sweep::runs(pool).await.unwrap_or_default();
    let (settings, now) = (setup.settings, setup.clock.now());
    let mut providers: Vec<&'static str> = (setup.sources.iter())
        .filter_map(|source| source.scheme.provider())
        .collect();
    providers.sort_unstable();
    providers.dedup();
    (providers.into_iter())
        .map(|provider| {
            let run = runs.iter().find(|run| run.provider == provider);
            sweep(settings, provider, run, now)
        })
        .collect()
}

fn sweep(settings: &ServeSettings, provider: &str, run: Option<&Run>, now: i64) -> Check {
    let check = format!("sweep.{provider}");
    let sweep = &settings.sweep;
    let (keyed, key) = match provider {
        "stripe" => (
            crate::secrets::non_empty(&sweep.stripe.stripe_api_key).is_some(),
            "STRIPE_API_KEY (a restricted key with read access to Events)",
        ),
        "razorpay" => (
            sweep.razorpay.configured(),
            "RAZORPAY_KEY_ID and RAZORPAY_KEY_SECRET",
        ),
        _ => (
            sweep.paypal.configured(),
            "PAYPAL_CLIENT_ID and PAYPAL_CLIENT_SECRET",
        ),
    };
    if !keyed {
        return Check::warn(
            check,
            "no API key: an event whose webhook never arrives is never found",
            format!("set {key}; the periodic sweep then applies what was never delivered"),
        );
    }
    let interval = sweep.sweep_interval;
    let Some(run) = run.filter(|run| run.last_run_at.is_some()) else {
        return match interval.is_zero() {
            true => Check::warn(
                check,
                "the periodic sweep is off (WEBHOOKD_SWEEP_INTERVAL=0) and none has run",
                format!(
                    "set WEBHOOKD_SWEEP_INTERVAL (10m), or run `webhookd sweep {provider} --since 72h` from a scheduler"
                ),
            ),
            false => Check::warn(
                check,
                "no periodic sweep has run yet",
                "start `webhookd serve` with WEBHOOKD_ROLE all or worker: the sweep runs in the processes that drain",
            ),
        };
    };
    let result = run.last_result.as_ref();
    let ago = |at: Option<crate::db::Timestamp>| {
        at.map_or_else(
            || "never".to_owned(),
            |at| format!("{} ago", spoken_secs(now - at.0.unix_timestamp())),
        )
    };
    if let Some(error) = result.and_then(|r| r.get("error")).and_then(Value::as_str) {
        return Check::fail(
            check,
            format!(
                "the last sweep ({}) failed: {}; the last that succeeded: {}",
                ago(run.last_run_at),
                bounded(error),
                ago(run.last_success_at)
            ),
            format!("mend what the error names (most often the API key: {key})"),
        );
    }
    let count = |field| {
        result
            .and_then(|r| r.get(field))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let (listed, recovered) = (count("listed"), count("recovered"));
    let detail = format!(
        "last swept {}: {listed} event(s) listed, {recovered} recovered",
        ago(run.last_success_at)
    );
    let stale = (run.last_success_at)
        .map(|at| now - at.0.unix_timestamp())
        .is_some_and(|age| {
            !interval.is_zero() && age > 3 * i64::try_from(interval.as_secs()).unwrap_or(i64::MAX)
        });
    if stale {
        return Check::warn(
            check,
            format!("no sweep has succeeded for three intervals: {detail}"),
            "check that a process with WEBHOOKD_ROLE all or worker runs, and its log for `the sweep failed`",
        );
    }
    if recovered > 0 {
        return Check::warn(
            check,
            format!("{detail}: events that no webhook brought, so deliveries are failing"),
            "check endpoint.* and deliveries.* above, and the provider's list of failed deliveries",
        );
    }
    Check::ok(check, detail)
}

/// A `--since` that reaches back past `age` seconds: whole hours, and a
/// margin.
fn since(age: i64) -> String {
    let hours = age.max(0) / 3_600 + 2;
    format!("{hours}h")
}
