//! The background workers `serve` runs in a draining process (the outbox
//! drainer, the periodic sweep) and the provider API clients, built from
//! the configuration.

use std::sync::Arc;

use secrecy::ExposeSecret;
use sqlx::PgPool;

use crate::api::{Api, Auth};
use crate::clock::Clock;
use crate::config::{self, RazorpayApiArgs, ServeSettings, StripeApiArgs};
use crate::fetch::Fetcher;
use crate::outbox::retry::RetryPolicy;
use crate::outbox::{Drainer, DrainerSettings};
use crate::providers::Providers;
use crate::secrets::non_empty;
use crate::sweep::schedule::{Sweeper, Target};

/// The outbox drainers `serve` runs, one for each sink of
/// [`super::sink::sinks`], each draining that sink's rows.
pub fn drainers(
    settings: &ServeSettings,
    pool: PgPool,
    clock: Clock,
) -> anyhow::Result<Vec<Drainer>> {
    let outbox = &settings.outbox;
    let drainer_settings = DrainerSettings {
        batch: outbox.outbox_batch,
        batch_bytes: outbox.outbox_batch_bytes,
        ordered: outbox.outbox_order == config::OutboxOrder::Key,
        concurrency: outbox.outbox_concurrency,
        lease: outbox.outbox_lease,
        poll: outbox.outbox_poll,
        retry: RetryPolicy {
            max_attempts: outbox.outbox_max_attempts,
            cap: outbox.outbox_backoff_cap,
        },
    };
    let configured = super::sink::sinks(settings, &clock)?;
    Ok(configured
        .into_iter()
        .map(|super::Configured { entry, sink }| {
            tracing::info!(
                sink = %entry.name,
                kind = sink.name(),
                topics = %entry.topics.patterns().join(","),
                "outbox drainer configured"
            );
            Drainer::new(pool.clone(), sink, drainer_settings, clock.clone()).for_sink(&entry.name)
        })
        .collect())
}

/// The periodic sweep `serve` runs in a draining process, when it is on
/// (`WEBHOOKD_SWEEP_INTERVAL` above zero), of each provider whose API key
/// is set (`STRIPE_API_KEY`; `RAZORPAY_KEY_ID` and `RAZORPAY_KEY_SECRET`;
/// `PAYPAL_CLIENT_ID` and `PAYPAL_CLIENT_SECRET`).
pub fn sweeper(
    settings: &ServeSettings,
    pool: PgPool,
    clock: Clock,
) -> anyhow::Result<Option<Sweeper>> {
    let sweep = &settings.sweep;
    if sweep.sweep_interval.is_zero() {
        tracing::info!("periodic sweep off (WEBHOOKD_SWEEP_INTERVAL=0)");
        return Ok(None);
    }
    // Each built-in source's events are judged as its deliveries are.
    let sources = Providers::registry(&super::providers_settings(settings)?);
    let target = |provider, api, default_window| Target {
        provider,
        api,
        window: sweep.sweep_window.unwrap_or(default_window),
        source: super::swept(&sources, provider),
    };
    let mut targets = Vec::new();
    if non_empty(&sweep.stripe.stripe_api_key).is_some() {
        targets.push(target(
            crate::providers::stripe::PROVIDER,
            stripe_api(&sweep.stripe)?,
            crate::sweep::stripe::DEFAULT_WINDOW,
        ));
        // Each connected account listed, swept on its own.
        for account in sweep.stripe.scope()?.accounts.iter().flatten() {
            let source = match super::swept_account(&sources, account) {
                Ok(source) => source,
                Err(error) => {
                    tracing::warn!(%error, "a connected account is not swept");
                    continue;
                }
            };
            targets.push(Target {
                source,
                ..target(
                    crate::providers::stripe::PROVIDER,
                    stripe_account_api(&sweep.stripe, account)?,
                    crate::sweep::stripe::DEFAULT_WINDOW,
                )
            });
        }
    }
    let razorpay = &sweep.razorpay;
    if razorpay.configured() {
        targets.push(target(
            crate::providers::razorpay::PROVIDER,
            razorpay_api(razorpay)?,
            crate::sweep::razorpay::DEFAULT_WINDOW,
        ));
    }
    if sweep.paypal.configured() {
        targets.push(target(
            crate::providers::paypal::PROVIDER,
            crate::sweep::paypal::api(&sweep.paypal)?,
            crate::sweep::paypal::DEFAULT_WINDOW,
        ));
    }
    if targets.is_empty() {
        tracing::info!(
            "periodic sweep off: no provider API key (STRIPE_API_KEY, RAZORPAY_KEY_ID, PAYPAL_CLIENT_ID)"
        );
        return Ok(None);
    }
    let providers: Vec<String> = targets.iter().map(Target::name).collect();
    tracing::info!(interval = ?sweep.sweep_interval, ?providers, "periodic sweep on");
    Ok(Some(Sweeper::new(
        pool,
        targets,
        sweep.sweep_interval,
        clock,
    )))
}

/// Razorpay's API, paced at [`RAZORPAY_RATE`] requests a second.
pub fn razorpay_api(args: &RazorpayApiArgs) -> anyhow::Result<Api> {
    let (Some(user), Some(password)) = (
        args.razorpay_key_id
            .as_ref()
            .filter(|id| !id.trim().is_empty()),
        args.razorpay_key_secret
            .as_ref()
            .filter(|secret| !secret.expose_secret().trim().is_empty()),
    ) else {
        anyhow::bail!("RAZORPAY_KEY_ID and RAZORPAY_KEY_SECRET are needed to read Razorpay's API");
    };
    Api::new(
        crate::providers::razorpay::PROVIDER,
        &args.razorpay_api_base,
        &Auth::Basic {
            user: user.clone(),
            password: password.clone(),
        },
        RAZORPAY_RATE,
        crate::sweep::razorpay::UNAUTHORIZED_HINT,
    )
}

/// Requests a second to Razorpay's API.
pub const RAZORPAY_RATE: u32 = 10;

/// What completes deliveries from Stripe's API before their transaction
/// ([`crate::fetch`]: thin events' data, subscriptions on a tie), when
/// `STRIPE_API_KEY` is set; without it, thin events are rejected saying
/// so, and a refresh on ties is refused.
pub fn fetcher(args: &StripeApiArgs) -> anyhow::Result<Option<Arc<Fetcher>>> {
    let refresh = args.refresh_subscriptions_on_tie()?;
    let Some(key) = non_empty(&args.stripe_api_key) else {
        return Ok(None);
    };
    let fetcher = Fetcher::new(&args.stripe_api_base, key.clone(), refresh)?;
    Ok(Some(Arc::new(fetcher)))
}

/// [`stripe_api`] reading connected account `account`'s objects (the
/// `Stripe-Account` header).
pub fn stripe_account_api(args: &StripeApiArgs, account: &str) -> anyhow::Result<Api> {
    let value = reqwest::header::HeaderValue::from_str(account)
        .map_err(|_| anyhow::anyhow!("a connected account is an id such as acct_1A2b3C"))?;
    Ok(stripe_api(args)?.with_header("stripe-account", value))
}

/// Stripe's API, paced at `WEBHOOKD_SWEEP_RATE` requests a second.
pub fn stripe_api(args: &StripeApiArgs) -> anyhow::Result<Api> {
    let key = args
        .stripe_api_key
        .as_ref()
        .filter(|key| !key.expose_secret().trim().is_empty())
        .ok_or_else(|| {
            anyhow::anyhow!("STRIPE_API_KEY is not set (a key with read access to Events)")
        })?;
    Api::new(
        crate::providers::stripe::PROVIDER,
        &args.stripe_api_base,
        &Auth::Bearer(key.clone()),
        args.rate,
        crate::sweep::stripe::UNAUTHORIZED_HINT,
    )
}

/// The tables partitioned by month (`db::partitions`), each by its owner.
const PARTITIONED: &[&str] = &[
    crate::events::partitions::TABLE,
    crate::outbox::store::retention::TABLE,
    crate::outbox::store::retention::ATTEMPTS,
];

/// Makes sure every partitioned table has its months ahead; the names of
/// the partitions created.
pub async fn ensure_partitions(pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    let mut created = Vec::new();
    for table in PARTITIONED {
        created.extend(crate::db::partitions::ensure(pool, table, None).await?);
    }
    Ok(created)
}

/// Every process makes sure of the months ahead, at start and every hour,
/// until `shutdown`.
pub async fn partitions(pool: PgPool, shutdown: tokio_util::sync::CancellationToken) {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(3600);
    crate::clock::every(EVERY, &shutdown, || async {
        match ensure_partitions(&pool).await {
            Ok(created) if created.is_empty() => {}
            Ok(created) => tracing::info!(?created, "partitions created ahead"),
            Err(error) => tracing::warn!(error = %error, "could not create partitions ahead"),
        }
    })
    .await;
}
