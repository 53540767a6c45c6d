//! The `webhookd` binary: read the command line and the configuration,
//! start logging, run the command ([`webhookd::cli::dispatch`]).

use std::process::ExitCode;

use webhookd::cli::Command;
use webhookd::telemetry;

#[tokio::main]
async fn main() -> ExitCode {
    let (cli, layers) = match webhookd::cli::read(std::env::args_os().collect()) {
        Ok(read) => read,
        Err(invalid) => return webhookd::cli::exit_code(Err(invalid.into())),
    };
    let to = match cli.command {
        None | Some(Command::Serve(_)) => telemetry::LogTo::Stdout,
        Some(_) => telemetry::LogTo::Stderr,
    };
    telemetry::init(cli.log_format, to);
    let code = webhookd::cli::exit_code(webhookd::cli::dispatch::run(cli, &layers).await);
    // The last lines (`stopped`, the error), unless the output is stalled.
    telemetry::flush(std::time::Duration::from_secs(1));
    code
}
