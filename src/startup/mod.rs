//! Wires configuration, the pool and the router into a running server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::config::{self, DatabaseSettings, ServeSettings};
use crate::db;
use crate::http::metrics::{Metrics, WorkerStats};
use crate::http::serve::{self, ConnectionLimits};
use crate::http::{self, AppState, Limits};
use crate::ingest::{Ingestor, Wake};
use crate::providers::Providers;

mod doctor;
mod settings;
mod sink;
mod sources;
mod workers;

pub use doctor::examine;
use settings::connection_limits;
pub use settings::{
    batch_settings, database_options, migrate, pool, problems, require_sessions, validate,
};
pub use sink::{Configured, sink_problems, sinks};
pub use sources::{providers_settings, registry, swept, swept_account, swept_of};
pub use workers::{
    RAZORPAY_RATE, drainers, ensure_partitions, fetcher, razorpay_api, stripe_account_api,
    stripe_api, sweeper,
};

/// What the workers of this process (its drainer, its sweep) share with the
/// API.
#[derive(Debug, Default)]
pub struct Workers {
    /// Their counters, for `/metrics`.
    pub stats: WorkerStats,
    /// How ingest wakes the drainer: in process when it lives here, else
    /// `pg_notify` for drainers elsewhere.
    pub wake: Wake,
    /// Where the ingest batches run: shutdown waits for them.
    pub tasks: TaskTracker,
}

pub struct Application {
    listener: TcpListener,
    router: axum::Router,
    /// The admin listener and its routes, unless `WEBHOOKD_ADMIN_LISTEN=off`.
    admin: Option<(TcpListener, axum::Router)>,
    connections: ConnectionLimits,
    shutdown: CancellationToken,
    grace: Duration,
    /// Closed once the server stopped, so that shutdown can wait for its
    /// batches even while a connection outlives the grace period.
    ingestor: Ingestor,
    /// Written once more when the server stopped: the requests that were
    /// in flight at the signal noted theirs after the task's last write.
    arrivals: (Arc<crate::arrivals::Arrivals>, PgPool),
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
        let providers = Providers::from_settings(&providers_settings(settings)?)?;
        if providers.names().is_empty() {
            tracing::warn!("no provider has a secret configured: every /webhooks/... answers 404");
        }
        tracing::info!(providers = ?providers.names(), "mounted providers");
        let metrics = Arc::new(Metrics::new(workers.stats));
        let ingestor = Ingestor::start_with_sizes(
            pool.clone(),
            batch_settings(settings),
            workers.wake,
            &workers.tasks,
            metrics.batch_sizes(),
        );
        let arrivals = Arc::new(crate::arrivals::Arrivals::new(clock.clone()));
        let pool_of_arrivals = pool.clone();
        workers.tasks.spawn({
            let (arrivals, pool, shutdown) = (arrivals.clone(), pool.clone(), shutdown.clone());
            async move { arrivals.run(pool, shutdown).await }
        });
        let state = AppState {
            ingestor: ingestor.clone(),
            arrivals: arrivals.clone(),
            pool,
            providers,
            fetcher: workers::fetcher(&settings.sweep.stripe)?,
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
        let admin = admin(settings, &state, limits).await?;
        Ok(Application {
            listener,
            admin,
            router: http::router(state, limits, settings.role.serves_webhooks()),
            connections,
            shutdown,
            grace: settings.shutdown_grace,
            ingestor,
            arrivals: (arrivals, pool_of_arrivals),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The admin listener's address, unless it is off.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// Serves until the shutdown token is cancelled, then stops accepting and
    /// lets in-flight requests finish, for at most the grace period.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        tracing::info!(address = %self.local_addr(), "listening");
        let admin = async {
            if let Some((listener, router)) = self.admin {
                serve::serve(
                    listener,
                    router,
                    ConnectionLimits {
                        with_peer_address: true,
                        ..self.connections
                    },
                    self.shutdown.clone(),
                    self.grace,
                )
                .await;
            }
        };
        let public = serve::serve(
            self.listener,
            self.router,
            self.connections,
            self.shutdown.clone(),
            self.grace,
        );
        tokio::join!(public, admin);
        self.ingestor.close();
        let (arrivals, pool) = &self.arrivals;
        arrivals.flush(pool).await;
        Ok(())
    }
}

/// Binds the admin listener, with the console when it has a token, and
/// says where it is.
async fn admin(
    settings: &ServeSettings,
    state: &AppState,
    limits: Limits,
) -> anyhow::Result<Option<(TcpListener, axum::Router)>> {
    let (Some(address), asked) = settings.admin.listen() else {
        tracing::info!("the admin listener is off (WEBHOOKD_ADMIN_LISTEN=off)");
        return Ok(None);
    };
    let listener = match TcpListener::bind(address).await {
        Ok(listener) => listener,
        // Left at its default, the port may be another process's (a second
        // webhookd on the host, from before the admin listener existed).
        Err(error) if !asked && error.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::warn!(
                %address,
                "the admin listener did not start: its default address is in use (set WEBHOOKD_ADMIN_LISTEN to another address, or to off)"
            );
            return Ok(None);
        }
        Err(error) => {
            return Err(error).with_context(|| {
                format!("cannot listen on {address} for the admin listener (set WEBHOOKD_ADMIN_LISTEN to another address, or to off)")
            });
        }
    };
    let bound = listener.local_addr()?;
    let console = settings.admin.admin_token.0.as_ref().map(|token| {
        http::console::Auth::new(token, settings.admin.admin_session_ttl, state.clock.clone())
    });
    if console.is_some() {
        tracing::info!(address = %bound, "console at http://{bound}/console");
        if !bound.ip().to_canonical().is_loopback() {
            tracing::warn!(
                address = %bound,
                "the console is served over plain http on an address other machines may reach: put it behind an https proxy (that sends X-Forwarded-Proto: https) or set WEBHOOKD_ADMIN_LISTEN to a loopback address"
            );
        }
    } else {
        tracing::info!(address = %bound, "admin listener up; the console is off until WEBHOOKD_ADMIN_TOKEN is set");
    }
    let limits = Limits {
        max_body_bytes: ADMIN_MAX_BODY_BYTES,
        ..limits
    };
    Ok(Some((
        listener,
        http::admin_router(state.clone(), limits, console, doctor(settings, state)),
    )))
}

/// What the console's doctor page runs: [`examine`] of `settings` on the
/// application's pool and clock.
fn doctor(settings: &ServeSettings, state: &AppState) -> http::console::Doctor {
    let settings = Arc::new(settings.clone());
    let (pool, clock) = (state.pool.clone(), state.clock.clone());
    http::console::Doctor(Arc::new(move || {
        let (settings, pool, clock) = (settings.clone(), pool.clone(), clock.clone());
        Box::pin(async move { examine(&settings, &pool, &clock).await })
    }))
}

/// The largest request the admin listener reads: its forms are small.
const ADMIN_MAX_BODY_BYTES: usize = 64 * 1024;

/// `webhookd serve` with `settings` (their generic sources included, see
/// [`ServeSettings::with_sources`]): check that the pool's connections are
/// what `WEBHOOKD_DB_POOLER` says, migrate, then run the drainer and the
/// periodic sweep (when this process drains) and the HTTP server until a
/// signal stops them.
pub async fn serve(
    settings: ServeSettings,
    database: &DatabaseSettings,
    pool: sqlx::PgPool,
) -> anyhow::Result<()> {
    validate(&settings, database)?;
    // A broker sink's credentials, exchange or stream, before the database.
    sink::check_sinks(&settings).await?;
    let options = database_options(database)?;
    // Before migrating: sqlx migrates under a session lock, which a
    // transaction pooler would leave on a server connection.
    require_sessions(database, &pool).await?;
    if database.db_pooler == config::DbPooler::None {
        db::detection::watch();
    }
    if db::session_options(&options)?.is_some() {
        migrate(database)
            .await
            .context("migrations failed at start-up")?;
    } else {
        // Behind a transaction pooler with no direct URL: no session to
        // migrate on, so only check that someone did.
        require_migrated(&pool).await?;
    }
    ids_past_now(&pool).await?;
    let shutdown = CancellationToken::new();
    let stopped = CancellationToken::new();
    let signals = tokio::spawn(stop_on_signal(shutdown.clone(), stopped.clone()));
    let tasks = TaskTracker::new();
    let mut workers = Workers {
        tasks: tasks.clone(),
        ..Workers::default()
    };
    let mut handed = None;
    // Every process that ingests makes sure of the months ahead, at once
    // and then every hour.
    tasks.spawn(workers::partitions(pool.clone(), shutdown.clone()));
    if settings.role.drains() {
        let listen = db::session_pool(&options)?;
        if listen.is_none() {
            tracing::info!(
                poll = ?settings.outbox.outbox_poll,
                "the outbox drainer polls: LISTEN needs a session, which a transaction pooler does not give (set WEBHOOKD_DIRECT_DATABASE_URL)"
            );
        }
        let drainers = drainers(&settings, pool.clone(), Clock::System)?;
        // Rows are written for the sinks this process drains, from now on.
        route(&pool, &settings).await?;
        let mut wakers = Vec::new();
        for drainer in drainers {
            let drainer = drainer.listening_on(listen.clone());
            let sink = drainer.route().to_owned();
            (workers.stats.deliveries).push((sink.clone(), drainer.stats().clone()));
            wakers.push((sink, drainer.waker()));
            tasks.spawn(drainer.run(shutdown.clone(), settings.shutdown_grace));
        }
        // Ingest wakes these drainers directly; LISTEN still hears ingest
        // in other processes (the API role).
        let wakers = crate::outbox::Wakers::new(wakers);
        workers.wake = Wake::InProcess(wakers.clone());
        handed = Some(wakers);
        tasks.spawn(crate::ingest::owner_wait::run(
            pool.clone(),
            Clock::System,
            settings.owner_wait,
            shutdown.clone(),
        ));
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
    // Rows committed while the drainer was stopping: due at once for the
    // next process, not after their lease.
    if let Some(wakers) = handed {
        match crate::outbox::give_back_all(&pool, &wakers).await {
            Ok(0) => {}
            Ok(rows) => tracing::info!(rows, "outbox rows handed too late given back"),
            Err(error) => {
                tracing::warn!(error = %error, "outbox rows handed too late wait for their lease")
            }
        }
    }
    pool.close().await;
    // A second signal forces exit until here; now nothing is left to wait for.
    stopped.cancel();
    let _ = signals.await;
    tracing::info!("stopped");
    served
}

/// Moves the ids that reach the user's systems (the outbox's `webhook-id`,
/// a wallet entry's `entry_id`) past every one handed out so far: after a
/// restore from a backup, none is handed out again for another message.
/// Run by every command that writes them (`serve`, `migrate`, `sweep`
/// but a dry run, `events replay`) before it writes.
pub async fn ids_past_now(pool: &PgPool) -> anyhow::Result<()> {
    crate::outbox::store::ids_past_now(pool)
        .await
        .context("cannot move the outbox's ids on")?;
    crate::ledger::ids_past_now(pool)
        .await
        .context("cannot move the wallet entries' ids on")
}

/// Makes the outbox's routing the sinks of `settings`, each of which this
/// process drains, with their topics ([`crate::outbox::store::routes::sync`]),
/// and says what changed.
async fn route(pool: &PgPool, settings: &ServeSettings) -> anyhow::Result<()> {
    let entries = settings.outbox.every_sink()?;
    let sinks: Vec<(&str, &config::Topics)> = (entries.iter())
        .map(|entry| (entry.name.as_str(), &entry.topics))
        .collect();
    let synced = crate::outbox::store::routes::sync(pool, &sinks)
        .await
        .context("cannot write the outbox's routing")?;
    for sink in &synced.added {
        tracing::info!(
            sink,
            "sink added: it takes the outbox rows written from now on"
        );
    }
    for sink in &synced.changed {
        tracing::info!(
            sink,
            "sink's topics changed: rows written from now on follow them"
        );
    }
    for (sink, undelivered) in &synced.removed {
        tracing::warn!(
            sink,
            undelivered,
            "sink removed: no rows are written for it any more; its undelivered rows stay, listed by `webhookd outbox list`"
        );
    }
    Ok(())
}

/// Fails unless every migration of this binary has been applied.
async fn require_migrated(pool: &PgPool) -> anyhow::Result<()> {
    let applied = db::migrations_applied(pool)
        .await
        .context("cannot read which migrations are applied")?;
    anyhow::ensure!(
        applied,
        "the database has migrations pending, and serve does not migrate behind a transaction \
         pooler (WEBHOOKD_DB_POOLER=transaction) without a session: run `webhookd migrate` with \
         DATABASE_URL on the database itself (and WEBHOOKD_DB_POOLER unset), or set \
         WEBHOOKD_DIRECT_DATABASE_URL"
    );
    Ok(())
}

/// The first SIGTERM or SIGINT starts a graceful shutdown; a second forces
/// exit. Returns once `stopped` is cancelled (everything else has ended).
async fn stop_on_signal(shutdown: CancellationToken, stopped: CancellationToken) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("can install a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
        () = stopped.cancelled() => return,
    }
    tracing::info!("shutdown requested: finishing in-flight requests");
    shutdown.cancel();
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
        () = stopped.cancelled() => return,
    }
    tracing::warn!("second signal: exiting now");
    std::process::exit(130);
}
