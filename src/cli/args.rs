//! The command line: the flags every command reads and the subcommands.
//! Each subcommand's own arguments are defined beside it, in its module.

use std::net::SocketAddr;

use clap::{Parser, Subcommand};

use super::drill::DrillArgs;
use super::events::EventsCommand;
use super::outbox::OutboxCommand;
use super::prune::PruneArgs;
use super::reconcile::ReconcileArgs;
pub use super::retention::RetentionArgs;
use super::send::SendArgs;
use super::sweep::{ImportArgs, SweepCommand};
use crate::config::{DatabaseSettings, LogFormat, ServeSettings};

#[derive(Debug, Parser)]
#[command(name = "webhookd", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub database: DatabaseSettings,

    /// Log output: `pretty` for a terminal, `json` for containers.
    #[arg(long, env = "WEBHOOKD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty, global = true)]
    pub log_format: LogFormat,

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
    /// Delete events and delivered outbox rows older than the retention, in
    /// short batches that never wait on ingest. Dead and deferred rows are kept.
    Prune(PruneArgs),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
