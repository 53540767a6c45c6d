//! `webhookd [command]`: one match; each command opens what it needs (a
//! database pool only for those that read or write one).

use std::io::Write;

use anyhow::Context;
use clap::CommandFactory;
use sqlx::PgPool;

use super::args::{Cli, Command};
use super::drill::DrillArgs;
use super::reconcile::ReconcileArgs;
use crate::clock::Clock;
use crate::config::{DatabaseSettings, Invalid, Layers, ServeSettings, SourceSettings};
use crate::startup;

/// Runs the command `cli` names (`serve` when none), writing its answer to
/// stdout. `layers`: the configuration `cli` was read from; only `config`
/// runs with a file that holds what is no setting.
pub async fn run(cli: Cli, layers: &Layers) -> anyhow::Result<()> {
    let out = &mut std::io::stdout();
    if let Some(Command::Config(command)) = cli.command {
        return super::config::run(command, layers, &Cli::command(), out).await;
    }
    if let Some(Command::Doctor(args)) = cli.command {
        let passed = super::doctor::run(
            args,
            layers,
            &Cli::command(),
            &cli.database,
            &Clock::System,
            out,
        )
        .await?;
        anyhow::ensure!(passed, "a check failed (see its fix)");
        return Ok(());
    }
    layers.require_valid()?;
    let database = &cli.database;
    match cli.command {
        None => serve(ServeSettings::from_layers(layers)?, database).await,
        Some(Command::Serve(settings)) => serve(settings.with_sources(layers)?, database).await,
        Some(Command::Config(_) | Command::Doctor(_)) => unreachable!("run above"),
        Some(Command::Send(args)) => super::send::run(&args, out).await,
        Some(Command::Drill(args)) => drill(&args, database, out).await,
        Some(Command::Healthcheck { url, listen }) => {
            let url = url.unwrap_or_else(|| format!("http://127.0.0.1:{}/readyz", listen.port()));
            super::healthcheck(&url, out).await
        }
        Some(Command::Migrate) => migrate(database).await,
        Some(Command::Outbox(command)) => {
            with_pool(database, async |pool| {
                super::outbox::run(pool, &command, out).await
            })
            .await
        }
        Some(Command::Events(command)) => {
            with_pool(database, async |pool| {
                super::events::run(pool, &command, &configured(layers)?, out).await
            })
            .await
        }
        Some(Command::Explain { subject }) => explain(database, &subject, out).await,
        Some(Command::Reconcile(args)) => reconcile(database, &args, out).await,
        Some(Command::Sweep(command)) => {
            with_pool(database, async |pool| {
                let configured = configured(layers)?;
                super::sweep::sweep(pool, &command, &configured, &Clock::System, out).await
            })
            .await
        }
        Some(Command::Import(args)) => {
            with_pool(database, async |pool| {
                let configured = configured(layers)?;
                super::sweep::import(pool, &args, &configured, &Clock::System, out).await
            })
            .await
        }
        Some(Command::Erase(command)) => {
            with_pool(database, async |pool| {
                super::erase::run(pool, &command, out).await
            })
            .await
        }
        Some(Command::Prune(args)) => {
            with_pool(database, async |pool| {
                super::prune::run(pool, &args, &Clock::System, out)
                    .await
                    .map(|_| ())
            })
            .await
        }
    }
}

/// The sources the file and the environment configure, as `serve` reads
/// them.
fn configured(layers: &Layers) -> Result<Vec<SourceSettings>, Invalid> {
    crate::config::sources_from_env(layers.variables())
        .map_err(|error| Invalid::one(format!("{error:#}")))
}

async fn serve(settings: ServeSettings, database: &DatabaseSettings) -> anyhow::Result<()> {
    startup::serve(settings, database, startup::pool(database)?).await
}

async fn migrate(database: &DatabaseSettings) -> anyhow::Result<()> {
    let pool = startup::pool(database)?;
    startup::require_sessions(database, &pool).await?;
    startup::migrate(database)
        .await
        .context("migrations failed")?;
    let created = startup::ensure_partitions(&pool)
        .await
        .context("could not create the months ahead of the partitioned tables")?;
    startup::ids_past_now(&pool).await?;
    tracing::info!(?created, "migrations applied, partitions ready");
    Ok(())
}

/// Fails (exit 1) when the drill did not pass.
async fn drill(
    args: &DrillArgs,
    database: &DatabaseSettings,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    // Verification is optional: only with a database to look in.
    let pool = match database.url() {
        Ok(_) => Some(startup::pool(database)?),
        Err(_) => None,
    };
    let passed = super::drill::run(args, pool.as_ref(), out).await?;
    anyhow::ensure!(passed, "the drill failed (see its report)");
    Ok(())
}

/// Fails (exit 1) when nothing is known about `subject`.
async fn explain(
    database: &DatabaseSettings,
    subject: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let found = with_pool(database, async |pool| {
        super::explain::run(pool, subject, out).await
    })
    .await?;
    anyhow::ensure!(found, "nothing found for {}", super::id(subject));
    Ok(())
}

/// Fails (exit 1) when the ledger does not reconcile (with itself, or
/// with the provider of `--against`).
async fn reconcile(
    database: &DatabaseSettings,
    args: &ReconcileArgs,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let ok = with_pool(database, async |pool| match args.against {
        Some(against) => super::reconcile::against(pool, args, against, &Clock::System, out).await,
        None => super::reconcile::run(pool, &args.retention, out).await,
    })
    .await?;
    anyhow::ensure!(ok, "the ledger does not reconcile");
    Ok(())
}

/// Runs `command` with a pool of its own, closed after it, once the pool
/// is known to be what `WEBHOOKD_DB_POOLER` says ([`startup::require_sessions`]).
async fn with_pool<T>(
    database: &DatabaseSettings,
    command: impl AsyncFnOnce(&PgPool) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let pool = startup::pool(database)?;
    startup::require_sessions(database, &pool).await?;
    let result = command(&pool).await;
    pool.close().await;
    result
}
