//! What this machine and its database say: the database reached, its
//! migrations, the clock against the database's and the provider's, and
//! who can reach the admin listener.

use std::time::{Duration, UNIX_EPOCH};

use sqlx::PgPool;

use super::{Check, Setup, spoken};
use crate::config::ServeSettings;
use crate::db;

/// Longest the database may take to answer.
const WITHIN: Duration = Duration::from_secs(5);

/// The database answers, and which Postgres it is.
pub(super) async fn database(pool: &PgPool) -> Check {
    let version = sqlx::query_scalar::<_, String>("select current_setting('server_version')");
    match tokio::time::timeout(WITHIN, version.fetch_one(pool)).await {
        Ok(Ok(version)) => Check::ok("database", format!("PostgreSQL {version} answers")),
        Ok(Err(error)) => Check::fail(
            "database",
            format!(
                "the database refused or failed: {}",
                bounded(&error.to_string())
            ),
            "check DATABASE_URL (host, port, user, password, database) and that Postgres runs; \
             until webhookd reaches it, every delivery is answered 503 and the provider retries",
        ),
        Err(_) => Check::fail(
            "database",
            format!("the database did not answer within {}", spoken(WITHIN)),
            "check that Postgres runs and that this machine reaches DATABASE_URL's host and port",
        ),
    }
}

/// This binary's migrations are applied, none failed, none unknown.
pub(super) async fn migrations(pool: &PgPool) -> Check {
    let state = match db::migrations(pool).await {
        Ok(state) => state,
        Err(error) => {
            return Check::fail(
                "migrations",
                format!(
                    "could not read which migrations are applied: {}",
                    bounded(&error.to_string())
                ),
                "check that DATABASE_URL's user may read _sqlx_migrations",
            );
        }
    };
    if let Some(version) = state.failed.first() {
        return Check::fail(
            "migrations",
            format!("migration {version} is marked failed: it stopped half way"),
            "read the error `webhookd migrate` prints, mend what it names, and run it again",
        );
    }
    if !state.pending.is_empty() {
        let name = |(version, description): &(i64, String)| format!("{version} {description}");
        let names = match state.pending.as_slice() {
            [first, _, _, .., last] => format!("{} ... {}", name(first), name(last)),
            few => few.iter().map(name).collect::<Vec<_>>().join(", "),
        };
        return Check::fail(
            "migrations",
            format!(
                "{} migration(s) of this binary are not applied: {names}",
                state.pending.len()
            ),
            "run `webhookd migrate` (serve also migrates at start); docs/OPERATIONS.md says \
             which ones to run while quiet",
        );
    }
    if !state.changed.is_empty() {
        return Check::warn(
            "migrations",
            format!(
                "applied migrations differ from this binary's: {:?}",
                state.changed
            ),
            "run the webhookd release that applied them, or restore its migrations",
        );
    }
    if !state.unknown.is_empty() {
        return Check::warn(
            "migrations",
            format!(
                "the database has {} migration(s) this binary does not know: a newer webhookd migrated it",
                state.unknown.len()
            ),
            "run the newer release here too",
        );
    }
    Check::ok("migrations", "every migration is applied")
}

/// This machine's clock against the database's, and the provider's (the
/// `Date` of its API's answer), against the signature tolerance: a
/// delivery signed longer ago than it (by the provider's clock, as ours
/// reads it) is refused.
pub(super) async fn clock(
    setup: &Setup<'_>,
    pool: Option<&PgPool>,
    providers: &[(&str, super::Dated)],
) -> Check {
    let tolerance = i64::try_from(setup.settings.tolerance_secs).unwrap_or(i64::MAX);
    let now = setup.clock.now();
    let mut skews = Vec::new();
    if let Some(pool) = pool {
        let theirs =
            sqlx::query_scalar::<_, f64>("select extract(epoch from clock_timestamp())::float8");
        if let Ok(Ok(theirs)) = tokio::time::timeout(WITHIN, theirs.fetch_one(pool)).await {
            // To the second, as this clock and the provider's.
            #[allow(clippy::cast_possible_truncation)]
            skews.push(("the database's", now - theirs.floor() as i64));
        }
    }
    for (whose, (at, came)) in providers {
        // Their clock now: what it said, and the time since it said it.
        if let Ok(theirs) = (*at + came.elapsed()).duration_since(UNIX_EPOCH) {
            let theirs = i64::try_from(theirs.as_secs()).unwrap_or(i64::MAX);
            skews.push((whose, now - theirs));
        }
    }
    if skews.is_empty() {
        return Check::warn(
            "clock",
            "no other clock could be read to compare with",
            "keep the clock synchronised (NTP: `timedatectl set-ntp true`)",
        );
    }
    // Those it agrees with together, then each it differs from.
    let agreeing: Vec<&str> = (skews.iter())
        .filter(|(_, skew)| *skew == 0)
        .map(|(whose, _)| *whose)
        .collect();
    let mut said: Vec<String> = Vec::new();
    if !agreeing.is_empty() {
        said.push(format!(
            "agrees with {} to the second",
            agreeing.join(" and ")
        ));
    }
    for (whose, skew) in skews.iter().filter(|(_, skew)| *skew != 0) {
        let by = spoken(Duration::from_secs(skew.unsigned_abs()));
        let side = if *skew > 0 { "ahead of" } else { "behind" };
        said.push(format!("is {by} {side} {whose}"));
    }
    let detail = format!(
        "this machine's clock {}; signatures are accepted {} either way (WEBHOOKD_TOLERANCE_SECS)",
        said.join(" and "),
        spoken(Duration::from_secs(setup.settings.tolerance_secs))
    );
    let worst = skews.iter().map(|(_, skew)| skew.abs()).max().unwrap_or(0);
    let fix = "synchronise the clock (NTP: `timedatectl set-ntp true`, or chrony); a clock off \
               by more than the tolerance refuses every signed delivery as too old or too new";
    if worst > tolerance {
        Check::fail("clock", detail, fix)
    } else if worst > (tolerance / 4).max(5) {
        Check::warn("clock", detail, fix)
    } else {
        Check::ok("clock", detail)
    }
}

/// Who can reach the admin listener, and whether the console is on.
pub(super) fn admin(settings: &ServeSettings) -> Check {
    let (address, _) = settings.admin.listen();
    let console = settings.admin.admin_token.0.is_some();
    let Some(address) = address else {
        return Check::warn(
            "admin",
            "the admin listener is off (WEBHOOKD_ADMIN_LISTEN=off): no /metrics for alerts, no /readyz, no console",
            "set WEBHOOKD_ADMIN_LISTEN=127.0.0.1:9090 (and scrape /metrics there)",
        );
    };
    let beyond = !address.ip().to_canonical().is_loopback();
    match (beyond, console) {
        (false, true) => Check::ok(
            "admin",
            format!("console and /metrics on {address}, this machine only"),
        ),
        (false, false) => Check::warn(
            "admin",
            format!(
                "/metrics and health on {address}; the console is off (WEBHOOKD_ADMIN_TOKEN unset)"
            ),
            "set WEBHOOKD_ADMIN_TOKEN (16 characters or more: `openssl rand -hex 32`) to turn the console on",
        ),
        (true, false) => Check::warn(
            "admin",
            format!(
                "the admin listener is on {address}, which other machines may reach, with no token: \
                 /metrics is open to them and the console is off"
            ),
            "bind it to 127.0.0.1 (WEBHOOKD_ADMIN_LISTEN=127.0.0.1:9090), or keep the port \
             firewalled (in a container, publish it on the host's loopback only)",
        ),
        (true, true) => Check::warn(
            "admin",
            format!("the console is on {address}, which other machines may reach, over plain http"),
            "put it behind an https proxy that sends X-Forwarded-Proto: https, or bind it to \
             127.0.0.1 (in a container, publish the port on the host's loopback only)",
        ),
    }
}

/// An error as a check says it: within the bound of a line of output.
pub(super) fn bounded(text: &str) -> String {
    crate::telemetry::bounded_to(text, crate::telemetry::MAX_LOGGED_ERROR_BYTES).into_owned()
}

/// `mode.<source>` for each Stripe source that takes events of either
/// mode: a test-mode event then credits a real wallet.
pub(super) fn modes(sources: &[crate::providers::Source]) -> Vec<Check> {
    (super::of_scheme(sources, crate::providers::Scheme::Stripe).into_iter())
        .map(|source| {
            let check = format!("mode.{}", source.name);
            let variable = format!("WEBHOOKD_SOURCE_{}_LIVEMODE", source.name.to_ascii_uppercase());
            match source.scope.livemode {
                Some(true) => Check::ok(check, "live events only"),
                Some(false) => Check::ok(check, "test-mode events only"),
                None => Check::warn(
                    check,
                    format!("events of either mode are applied ({variable}=any): a test-mode event credits a real wallet"),
                    format!("set {variable}=true in production (false in a test set-up)"),
                ),
            }
        })
        .collect()
}
