//! Wires configuration, the pool and the router into a running server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::config::{self, DatabaseSettings, ServeSettings};
use crate::config::{RazorpayApiArgs, StripeApiArgs};
use crate::db;
use crate::http::metrics::{Metrics, WorkerStats};
use crate::http::serve::{self, ConnectionLimits};
use crate::http::{self, AppState, Limits};
use crate::ingest::batch::BatchSettings;
use crate::ingest::{Ingestor, Wake};
use crate::outbox::retry::RetryPolicy;
use crate::outbox::worker::LEASE_MARGIN;
use crate::outbox::{Drainer, DrainerSettings};
use crate::providers::Providers;
use crate::sinks::Sink;
use crate::sinks::http::HttpSink;
use crate::sinks::log::LogSink;
use crate::sweep::api::{Api, Auth};
use crate::sweep::schedule::{Sweeper, Target};

/// What the workers of this process (its drainer, its sweep) share with the
/// API.
#[derive(Debug, Default)]
pub struct Workers {
    /// Their counters, for `/metrics`.
    pub stats: WorkerStats,
    /// How ingest wakes the drainer: in process when it lives here, else
    /// `pg_notify` for drainers elsewhere.
    pub wake: Wake,
}

pub struct Application {
    listener: TcpListener,
    router: axum::Router,
    connections: ConnectionLimits,
    shutdown: CancellationToken,
    grace: Duration,
}

impl Application {
    /// Binds the listener (port 0 picks a free one) and builds the router.
    /// `workers`: what this process's drainer and sweep share with the API.
    pub async fn build(
        settings: &ServeSettings,
        pool: PgPool,
        clock: Clock,
        shutdown: CancellationToken,
        workers: Workers,
    ) -> anyhow::Result<Self> {
        let providers = Providers::from_settings(settings)?;
        if providers.names().is_empty() {
            tracing::warn!("no provider has a secret configured: every /webhooks/... answers 404");
        }
        tracing::info!(providers = ?providers.names(), "mounted providers");
        let metrics = Arc::new(Metrics::new(workers.stats));
        let sizes = metrics.batch_sizes();
        let state = AppState {
            ingestor: Ingestor::start_with_sizes(
                pool.clone(),
                batch_settings(settings),
                workers.wake,
                sizes,
            ),
            pool,
            providers,
            metrics,
            clock,
            shutdown: shutdown.clone(),
        };
        let limits = Limits {
            max_body_bytes: usize::try_from(settings.max_body_bytes).unwrap_or(usize::MAX),
            request_timeout: settings.request_timeout,
        };
        let connections = connection_limits(settings, &state.pool);
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        Ok(Application {
            listener,
            router: http::router(state, limits, settings.role.serves_webhooks()),
            connections,
            shutdown,
            grace: settings.shutdown_grace,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until the shutdown token is cancelled, then stops accepting and
    /// lets in-flight requests finish, for at most the grace period.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        tracing::info!(address = %self.local_addr(), "listening");
        serve::serve(
            self.listener,
            self.router,
            self.connections,
            self.shutdown,
            self.grace,
        )
        .await;
        Ok(())
    }
}

/// The group commit's settings from the configuration.
pub fn batch_settings(settings: &ServeSettings) -> BatchSettings {
    BatchSettings {
        max_events: settings.batch_max_events as usize,
        concurrency: settings.batch_concurrency as usize,
    }
}

/// The connection limits from the settings, with the connection cap held
/// below the open-file limit (raised to its hard limit first), less the
/// files the pool, the drainer's sink and the process itself need.
fn connection_limits(settings: &ServeSettings, pool: &PgPool) -> ConnectionLimits {
    let configured = &settings.connections;
    let open_files = serve::raise_open_file_limit();
    let mut reserved = serve::RESERVED_FILES + u64::from(pool.options().get_max_connections());
    if settings.role.drains() {
        reserved += settings.outbox.outbox_concurrency as u64;
    }
    let max_connections =
        serve::effective_max_connections(configured.max_connections, open_files, reserved);
    if max_connections < configured.max_connections {
        tracing::warn!(
            configured = configured.max_connections,
            effective = max_connections,
            open_files,
            reserved,
            "WEBHOOKD_MAX_CONNECTIONS held below the open-file limit"
        );
    } else {
        tracing::info!(max_connections, open_files, reserved, "connection limit");
    }
    ConnectionLimits {
        header_read_timeout: configured.header_read_timeout,
        write_timeout: configured.write_timeout,
        max_header_bytes: usize::try_from(configured.max_header_bytes).unwrap_or(usize::MAX),
        max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
    }
}

/// The periodic sweep `serve` runs in a draining process, when it is on
/// (`WEBHOOKD_SWEEP_INTERVAL` above zero), of each provider whose API key
/// is set (`STRIPE_API_KEY`; `RAZORPAY_KEY_ID` and `RAZORPAY_KEY_SECRET`).
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
    let mut targets = Vec::new();
    let stripe_key = sweep.stripe.stripe_api_key.as_ref();
    if stripe_key.is_some_and(|key| !key.expose_secret().trim().is_empty()) {
        targets.push(Target {
            provider: crate::providers::stripe::PROVIDER,
            api: stripe_api(&sweep.stripe)?,
            window: sweep
                .sweep_window
                .unwrap_or(crate::sweep::stripe::DEFAULT_WINDOW),
        });
    }
    // An empty variable (as `${VAR:-}` in compose files gives) means unset.
    let razorpay = &sweep.razorpay;
    let id_set = razorpay
        .razorpay_key_id
        .as_ref()
        .is_some_and(|id| !id.trim().is_empty());
    let secret_set = razorpay
        .razorpay_key_secret
        .as_ref()
        .is_some_and(|secret| !secret.expose_secret().trim().is_empty());
    if id_set && secret_set {
        targets.push(Target {
            provider: crate::providers::razorpay::PROVIDER,
            api: razorpay_api(&sweep.razorpay)?,
            window: sweep
                .sweep_window
                .unwrap_or(crate::sweep::razorpay::DEFAULT_WINDOW),
        });
    }
    if targets.is_empty() {
        tracing::info!("periodic sweep off: no provider API key (STRIPE_API_KEY, RAZORPAY_KEY_ID)");
        return Ok(None);
    }
    let providers: Vec<&str> = targets.iter().map(|t| t.provider).collect();
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

/// The outbox drainer `serve` runs: the `http` sink when `WEBHOOKD_SINK_URL`
/// is set (it then needs `WEBHOOKD_SINK_SECRET`), else the `log` sink.
pub fn drainer(settings: &ServeSettings, pool: PgPool, clock: Clock) -> anyhow::Result<Drainer> {
    let outbox = &settings.outbox;
    // An empty variable (as `${VAR:-}` in compose files gives) means unset.
    let set = |value: &Option<secrecy::SecretString>| {
        value
            .as_ref()
            .filter(|v| !v.expose_secret().trim().is_empty())
            .cloned()
    };
    let sink = match (set(&outbox.sink_url), set(&outbox.sink_secret)) {
        (Some(url), Some(secret)) => Sink::Http(Box::new(
            HttpSink::new(
                url.expose_secret(),
                secret.expose_secret(),
                outbox.sink_timeout,
                clock.clone(),
            )?
            .with_max_body_bytes(outbox.sink_max_body_bytes),
        )),
        (Some(_), None) => {
            anyhow::bail!("WEBHOOKD_SINK_URL is set but WEBHOOKD_SINK_SECRET is not")
        }
        (None, _) => Sink::Log(LogSink),
    };
    // A delivery only starts with its whole timeout and a margin left on
    // the lease (counted in whole seconds).
    anyhow::ensure!(
        outbox.outbox_lease > outbox.sink_timeout + LEASE_MARGIN + Duration::from_secs(1),
        "WEBHOOKD_OUTBOX_LEASE must exceed WEBHOOKD_SINK_TIMEOUT by more than 3 s"
    );
    tracing::info!(sink = sink.name(), "outbox drainer configured");
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
    Ok(Drainer::new(pool, sink, drainer_settings, clock))
}

/// `webhookd serve`: migrate, then run the drainer and the periodic sweep
/// (when this process drains) and the HTTP server until a signal stops them.
pub async fn serve(
    mut settings: ServeSettings,
    database: &DatabaseSettings,
    pool: sqlx::PgPool,
) -> anyhow::Result<()> {
    settings.sources = config::sources_from_env(
        // Only our own variables; others need not even be valid Unicode.
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
    )?;
    db::migrate(database)
        .await
        .context("migrations failed at start-up")?;
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let tasks = TaskTracker::new();
    let mut workers = Workers::default();
    if settings.role.drains() {
        let drainer = drainer(&settings, pool.clone(), Clock::System)?;
        workers.stats.deliveries = Some(drainer.stats().clone());
        // Ingest wakes this drainer directly; LISTEN still hears ingest in
        // other processes (the API role).
        workers.wake = Wake::InProcess(drainer.waker());
        tasks.spawn(drainer.run(shutdown.clone(), settings.shutdown_grace));
        if let Some(sweeper) = sweeper(&settings, pool.clone(), Clock::System)? {
            workers.stats.sweeps = Some(sweeper.stats.clone());
            tasks.spawn(sweeper.run(shutdown.clone()));
        }
    }
    let clock = Clock::System;
    let app = Application::build(&settings, pool.clone(), clock, shutdown.clone(), workers).await?;
    let served = app.run_until_stopped().await;
    // Whatever stopped the server stops the drainer too (soft stop, then hard).
    shutdown.cancel();
    tasks.close();
    tasks.wait().await;
    pool.close().await;
    tracing::info!("stopped");
    served
}

/// The first SIGTERM or SIGINT starts a graceful shutdown; a second forces exit.
async fn stop_on_signal(shutdown: CancellationToken) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("can install a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutdown requested: finishing in-flight requests");
    shutdown.cancel();
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::warn!("second signal: exiting now");
    std::process::exit(130);
}
