//! The command line: the flags every command reads and the subcommands.
//! Each subcommand's own arguments are defined beside it, in its module.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

use super::config::ConfigCommand;
use super::doctor::DoctorArgs;
use super::drill::DrillArgs;
use super::erase::EraseCommand;
use super::events::EventsCommand;
use super::outbox::OutboxCommand;
use super::prune::PruneArgs;
use super::reconcile::ReconcileArgs;
pub use super::retention::RetentionArgs;
use super::send::SendArgs;
use super::sweep::{ImportArgs, SweepCommand};
use crate::config::{DatabaseSettings, Invalid, Layers, LogFormat, ServeSettings};

#[derive(Debug, Parser)]
#[command(name = "webhookd", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub database: DatabaseSettings,

    /// Log output: `pretty` for a terminal, `json` for containers.
    #[arg(long, env = "WEBHOOKD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty, global = true)]
    pub log_format: LogFormat,

    /// A TOML file of settings whose keys mirror the variables (`listen`
    /// for WEBHOOKD_LISTEN; see webhookd.example.toml). The environment
    /// overrides it, and flags override both.
    #[arg(long, env = "WEBHOOKD_CONFIG", value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Receive webhooks over HTTP (the default when no subcommand is given).
    Serve(Box<ServeSettings>),
    /// Apply pending database migrations, then exit.
    Migrate,
    /// Inspect and re-queue outbox rows.
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// List, show or replay stored events.
    #[command(subcommand)]
    Events(EventsCommand),
    /// The story of one event, payment or user: events, effects, deliveries.
    Explain {
        /// An event id, a payment id (pi_, ch_, pay_, ...) or a user id.
        subject: String,
    },
    /// Check that every wallet balance equals the sum of its entries, and that
    /// every entry within the retention window has its event; exit 1 if not.
    Reconcile(Box<ReconcileArgs>),
    /// Drop the months of events past the retention (whole partitions),
    /// expire payloads past theirs, delete delivered outbox rows in short
    /// batches; ingest never waits. Dead and deferred rows are kept.
    Prune(PruneArgs),
    /// Remove a user's personal data from their events and outbox rows
    /// (erasure on request); the ledger stays.
    #[command(subcommand)]
    Erase(EraseCommand),
    /// Sign a sample provider event and POST it to a running webhookd.
    Send(Box<SendArgs>),
    /// Load and correctness drill: N unique signed events (Stripe credits, or
    /// a mix of Stripe and Razorpay events), each sent K times concurrently,
    /// retried like a provider; verified in the database.
    Drill(Box<DrillArgs>),
    /// Read the provider's API and apply what was never delivered.
    #[command(subcommand)]
    Sweep(SweepCommand),
    /// Record events an earlier handler applied, without effects, so that
    /// their redelivery or sweep is a duplicate.
    Import(Box<ImportArgs>),
    /// Check the configuration (every problem at once; exit 1 if any), or
    /// show it with where each value comes from.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Check what stands between a payment and its effect (the
    /// configuration, the database, the clock, each sink, the providers'
    /// endpoints, the traffic) and say what to do; exit 1 if a check fails.
    Doctor(DoctorArgs),
    /// Exit 0 when URL answers 2xx (for container health checks).
    Healthcheck {
        /// Default: /readyz on the port of WEBHOOKD_LISTEN (8080).
        url: Option<String>,
        #[arg(
            long,
            env = "WEBHOOKD_LISTEN",
            default_value = "0.0.0.0:8080",
            hide = true
        )]
        listen: SocketAddr,
    },
}

/// The command line `args` (the program's name first) over the
/// configuration file it names and the environment; a usage error,
/// `--help` and `--version` exit as clap's `parse` does.
pub fn read(args: Vec<OsString>) -> Result<(Cli, Layers), Invalid> {
    let layers = Layers::load(crate::config::file_named(&args).as_deref(), &Cli::command())?;
    let cli = crate::config::parse(&layers, args)?;
    Ok((cli, layers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_variable_a_flag_reads_has_one_key_of_its_own() {
        use crate::config::{CONFIG_VARIABLE, Keys, flags_of};
        let variables: Vec<String> = flags_of(&Cli::command()).into_keys().collect();
        let keys = Keys::new(variables.iter().filter(|v| *v != CONFIG_VARIABLE).cloned());
        for variable in variables.iter().filter(|v| *v != CONFIG_VARIABLE) {
            let key = keys
                .key(variable)
                .unwrap_or_else(|| panic!("{variable} has no key"));
            assert_eq!(
                keys.variable(&key).as_deref(),
                Some(variable.as_str()),
                "{key}"
            );
        }
        assert_eq!(
            keys.key(CONFIG_VARIABLE),
            None,
            "the file cannot name itself"
        );
    }
}
