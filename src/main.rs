//! The `webhookd` binary: parse the command line, start logging, run the
//! command ([`webhookd::cli::dispatch`]).

use std::process::ExitCode;

use clap::Parser;
use webhookd::cli::{Cli, Command};
use webhookd::telemetry;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let to = match cli.command {
        None | Some(Command::Serve(_)) => telemetry::LogTo::Stdout,
        Some(_) => telemetry::LogTo::Stderr,
    };
    telemetry::init(cli.log_format, to);
    let code = webhookd::cli::exit_code(webhookd::cli::dispatch::run(cli).await);
    // The last lines (`stopped`, the error), unless the output is stalled.
    telemetry::flush(std::time::Duration::from_secs(1));
    code
}
