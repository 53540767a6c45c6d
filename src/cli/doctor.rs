//! `webhookd doctor [--json]`: every check of [`crate::doctor`], with the
//! configuration's own first, as lines a person reads or as one JSON
//! object a check; fails (exit 1) when any check failed.

use std::io::Write;

use clap::Args;

use crate::clock::Clock;
use crate::config::{DatabaseSettings, Layers};
use crate::doctor::{self, Check, Status};
use crate::startup;

#[derive(Debug, Clone, Copy, Args)]
pub struct DoctorArgs {
    /// One JSON object a line, a check each: {"check", "status" (ok, warn
    /// or fail), "detail", "fix"}.
    #[arg(long)]
    pub json: bool,
}

/// Runs every check with the configuration `layers` holds (read for the
/// flags of `cli`) and the database of `database`, as of `clock`, and
/// prints them; `false` when any failed.
pub async fn run(
    args: DoctorArgs,
    layers: &Layers,
    cli: &clap::Command,
    database: &DatabaseSettings,
    clock: &Clock,
    out: &mut impl Write,
) -> anyhow::Result<bool> {
    let (problems, settings) = super::config::problems(layers, cli);
    let mut checks = vec![configuration(&problems)];
    match (settings, startup::pool(database)) {
        (Some(settings), Ok(pool)) => {
            checks.extend(startup::examine(&settings, &pool, clock).await);
            pool.close().await;
        }
        (None, _) => {}
        (Some(_), Err(error)) => checks.push(Check::fail(
            "database",
            format!("{error:#}"),
            "set DATABASE_URL to webhookd's database, postgres://user:password@host:5432/webhookd",
        )),
    }
    print(&checks, args.json, out)?;
    Ok(!doctor::failed(&checks))
}

/// `config`: what `webhookd config check` finds offline.
fn configuration(problems: &[String]) -> Check {
    match problems {
        [] => Check::ok(
            "config",
            "the file, the environment and the flags hold no problem",
        ),
        [one] => Check::fail(
            "config",
            super::shown(one, super::MAX_SHOWN_TEXT_BYTES),
            "mend it; `webhookd config check` says it again",
        ),
        many => Check::fail(
            "config",
            format!(
                "{} problems, the first: {}",
                many.len(),
                super::shown(&many[0], super::MAX_SHOWN_TEXT_BYTES)
            ),
            "`webhookd config check` lists every one",
        ),
    }
}

fn print(checks: &[Check], json: bool, out: &mut impl Write) -> anyhow::Result<()> {
    if json {
        for check in checks {
            writeln!(out, "{}", super::json_line(check)?)?;
        }
        return Ok(());
    }
    let width = checks.iter().map(|c| c.check.len()).max().unwrap_or(0);
    for check in checks {
        let text = |t: &str| super::shown(t, super::MAX_SHOWN_TEXT_BYTES).into_owned();
        writeln!(
            out,
            "{:<4}  {:<width$}  {}",
            check.status.as_str(),
            super::id(&check.check),
            text(&check.detail)
        )?;
        if !check.fix.is_empty() {
            writeln!(out, "{:<4}  {:<width$}  fix: {}", "", "", text(&check.fix))?;
        }
    }
    let count = |status| checks.iter().filter(|c| c.status == status).count();
    writeln!(
        out,
        "{} ok, {} warn, {} fail",
        count(Status::Ok),
        count(Status::Warn),
        count(Status::Fail)
    )?;
    Ok(())
}
