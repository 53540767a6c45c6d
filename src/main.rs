use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use webhookd::clock::Clock;
use webhookd::config::{Cli, Command, ServeSettings};
use webhookd::startup;
use webhookd::{db, telemetry};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let to = match cli.command {
        None | Some(Command::Serve(_)) => telemetry::LogTo::Stdout,
        Some(_) => telemetry::LogTo::Stderr,
    };
    telemetry::init(cli.log_format, to);
    let code = webhookd::cli::exit_code(run(cli).await);
    // The last lines (`stopped`, the error), unless the output is stalled.
    telemetry::flush(std::time::Duration::from_secs(1));
    code
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let out = &mut std::io::stdout();
    // Commands that need no database.
    match &cli.command {
        Some(Command::Send(args)) => return webhookd::cli::send::run(args, out).await,
        Some(Command::Drill(args)) => {
            // Verification is optional: only with a database to look in.
            let pool = match cli.database.url() {
                Ok(_) => Some(db::pool(&cli.database)?),
                Err(_) => None,
            };
            let passed = webhookd::cli::drill::run(args, pool.as_ref(), out).await?;
            anyhow::ensure!(passed, "the drill failed (see its report)");
            return Ok(());
        }
        Some(Command::Healthcheck { url, listen }) => {
            let url = url
                .clone()
                .unwrap_or_else(|| format!("http://127.0.0.1:{}/readyz", listen.port()));
            return webhookd::cli::healthcheck(&url, out).await;
        }
        _ => {}
    }
    let pool = db::pool(&cli.database)?;
    let result = match cli.command {
        Some(Command::Migrate) => {
            db::migrate(&cli.database)
                .await
                .context("migrations failed")?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Some(Command::Outbox(command)) => webhookd::cli::outbox::run(&pool, &command, out).await,
        Some(Command::Events(command)) => webhookd::cli::events::run(&pool, &command, out).await,
        Some(Command::Explain { subject }) => {
            let found = webhookd::cli::explain::run(&pool, &subject, out).await?;
            anyhow::ensure!(found, "nothing found for {}", webhookd::cli::id(&subject));
            Ok(())
        }
        Some(Command::Reconcile(args)) => {
            let ok = match args.against {
                Some(against) => {
                    webhookd::cli::reconcile::against(&pool, &args, against, &Clock::System, out)
                        .await?
                }
                None => webhookd::cli::reconcile::run(&pool, &args.retention, out).await?,
            };
            anyhow::ensure!(ok, "the ledger does not reconcile");
            Ok(())
        }
        Some(Command::Sweep(command)) => {
            webhookd::cli::sweep::sweep(&pool, &command, &Clock::System, out).await
        }
        Some(Command::Import(args)) => {
            webhookd::cli::sweep::import(&pool, &args, &Clock::System, out).await
        }
        Some(Command::Prune(args)) => webhookd::cli::prune::run(&pool, &args, &Clock::System, out)
            .await
            .map(|_| ()),
        Some(Command::Send(_) | Command::Drill(_) | Command::Healthcheck { .. }) => {
            unreachable!("handled above")
        }
        Some(Command::Serve(settings)) => {
            return startup::serve(*settings, &cli.database, pool).await;
        }
        None => return startup::serve(ServeSettings::default(), &cli.database, pool).await,
    };
    pool.close().await;
    result
}
