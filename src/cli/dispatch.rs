//! `webhookd [command]`: one match; each command opens what it needs (a
//! database pool only for those that read or write one).

use anyhow::Context;
use sqlx::PgPool;

use super::args::{Cli, Command};
use crate::clock::Clock;
use crate::config::{DatabaseSettings, ServeSettings};
use crate::{db, startup};

/// Runs the command `cli` names (`serve` when none), writing its answer to
/// stdout.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let out = &mut std::io::stdout();
    let database = &cli.database;
    match cli.command {
        None => startup::serve(ServeSettings::default(), database, db::pool(database)?).await,
        Some(Command::Serve(settings)) => {
            startup::serve(*settings, database, db::pool(database)?).await
        }
        Some(Command::Send(args)) => super::send::run(&args, out).await,
        Some(Command::Drill(args)) => {
            // Verification is optional: only with a database to look in.
            let pool = match database.url() {
                Ok(_) => Some(db::pool(database)?),
                Err(_) => None,
            };
            let passed = super::drill::run(&args, pool.as_ref(), out).await?;
            anyhow::ensure!(passed, "the drill failed (see its report)");
            Ok(())
        }
        Some(Command::Healthcheck { url, listen }) => {
            let url = url.unwrap_or_else(|| format!("http://127.0.0.1:{}/readyz", listen.port()));
            super::healthcheck(&url, out).await
        }
        Some(Command::Migrate) => {
            db::migrate(database).await.context("migrations failed")?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Some(Command::Outbox(command)) => {
            with_pool(database, async |pool| {
                super::outbox::run(pool, &command, out).await
            })
            .await
        }
        Some(Command::Events(command)) => {
            with_pool(database, async |pool| {
                super::events::run(pool, &command, out).await
            })
            .await
        }
        Some(Command::Explain { subject }) => {
            let found = with_pool(database, async |pool| {
                super::explain::run(pool, &subject, out).await
            })
            .await?;
            anyhow::ensure!(found, "nothing found for {}", super::id(&subject));
            Ok(())
        }
        Some(Command::Reconcile(args)) => {
            let ok = with_pool(database, async |pool| match args.against {
                Some(against) => {
                    super::reconcile::against(pool, &args, against, &Clock::System, out).await
                }
                None => super::reconcile::run(pool, &args.retention, out).await,
            })
            .await?;
            anyhow::ensure!(ok, "the ledger does not reconcile");
            Ok(())
        }
        Some(Command::Sweep(command)) => {
            with_pool(database, async |pool| {
                super::sweep::sweep(pool, &command, &Clock::System, out).await
            })
            .await
        }
        Some(Command::Import(args)) => {
            with_pool(database, async |pool| {
                super::sweep::import(pool, &args, &Clock::System, out).await
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

/// Runs `command` with a pool of its own, closed after it.
async fn with_pool<T>(
    database: &DatabaseSettings,
    command: impl AsyncFnOnce(&PgPool) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let pool = db::pool(database)?;
    let result = command(&pool).await;
    pool.close().await;
    result
}
