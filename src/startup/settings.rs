//! The configuration mapped into each part's own settings, and the one
//! place where the configuration of `serve` is checked as a whole
//! ([`validate`]). The parts never read the configuration themselves.

use std::time::Duration;

use sqlx::PgPool;

use crate::config::{
    DatabaseSettings, DbPooler, Invalid, SIMULATOR_WEBHOOK_ID, ServeSettings, SourceScheme,
};
use crate::db;
use crate::http::serve::{self, ConnectionLimits};
use crate::ingest::batch::BatchSettings;
use crate::outbox::worker::LEASE_MARGIN;
use crate::providers::{self, Providers};
use crate::secrets::non_empty;

/// Checks everything about the configuration of `serve` that can be checked
/// before anything starts, and reports every problem at once
/// ([`crate::config::Invalid`]).
pub fn validate(settings: &ServeSettings, database: &DatabaseSettings) -> anyhow::Result<()> {
    match problems(settings, database) {
        problems if problems.is_empty() => Ok(()),
        problems => Err(Invalid::new(problems).into()),
    }
}

/// Every problem of the configuration of `serve` that can be found before
/// anything starts, one sentence each, none quoting a value.
pub fn problems(settings: &ServeSettings, database: &DatabaseSettings) -> Vec<String> {
    let mut problems: Vec<String> = Vec::new();
    match database_options(database) {
        Err(error) => problems.extend(Invalid::problems_of(&error)),
        Ok(options) => {
            if let Err(error) = db::session_options(&options) {
                problems.push(error.to_string());
            }
        }
    }
    // Built to check every key, without creating PayPal's certificate
    // directory: that is checked read-only, and created when serving.
    let mut checked = match super::providers_settings(settings) {
        Ok(checked) => checked,
        Err(error) => {
            problems.push(format!("{error:#}"));
            providers::Settings::default()
        }
    };
    let dirs: std::collections::BTreeSet<_> = checked
        .sources
        .iter_mut()
        .filter_map(|source| source.paypal.as_mut()?.certs.dir.take())
        .collect();
    for dir in dirs {
        if let Err(error) = providers::paypal::certs::check_dir(&dir) {
            problems.push(format!("{error:#}"));
        }
    }
    if let Err(error) = Providers::from_settings(&checked) {
        problems.push(format!("{error:#}"));
    }
    problems.extend(paypal_problems(settings));
    if let Err(error) = settings.sweep.stripe.refresh_subscriptions_on_tie() {
        problems.push(format!("{error:#}"));
    }
    problems.extend(admin_problems(&settings.admin, settings.listen));
    let outbox = &settings.outbox;
    if settings.role.drains() {
        // The URL's scheme, its options, and the secret an HTTP sink needs.
        if let Err(error) = super::sink::sinks(settings, &crate::clock::Clock::System) {
            problems.push(format!("{error:#}"));
        }
        // A delivery only starts with its whole timeout and a margin left
        // on the lease (counted in whole seconds).
        if outbox.outbox_lease <= outbox.sink_timeout + LEASE_MARGIN + Duration::from_secs(1) {
            problems.push(
                "WEBHOOKD_OUTBOX_LEASE must exceed WEBHOOKD_SINK_TIMEOUT by more than 3 s".into(),
            );
        }
    }
    problems
}

/// What is wrong with the admin listener's settings. The token is never
/// quoted, only its length.
fn admin_problems(admin: &crate::config::AdminArgs, listen: std::net::SocketAddr) -> Vec<String> {
    let mut problems = Vec::new();
    if let (Some(address), _) = admin.listen()
        && address == listen
        && address.port() != 0
    {
        problems.push(
            "WEBHOOKD_ADMIN_LISTEN is the same address as WEBHOOKD_LISTEN: the console must not be on the public listener"
                .into(),
        );
    }
    if let Some(chars) = admin.admin_token.chars()
        && chars < crate::config::MIN_TOKEN_CHARS
    {
        problems.push(format!(
            "WEBHOOKD_ADMIN_TOKEN is too short ({chars} characters): use at least {}, e.g. `openssl rand -hex 32`",
            crate::config::MIN_TOKEN_CHARS
        ));
    }
    if admin.admin_session_ttl < MIN_SESSION_TTL {
        problems.push("WEBHOOKD_ADMIN_SESSION_TTL must be at least 1m".into());
    }
    problems
}

/// The shortest console login allowed: shorter ones expire as they start.
const MIN_SESSION_TTL: Duration = Duration::from_secs(60);

/// What is wrong with PayPal's settings, if a PayPal source is mounted.
fn paypal_problems(settings: &ServeSettings) -> Vec<String> {
    let mut problems = Vec::new();
    if settings
        .paypal
        .webhook_ids()
        .iter()
        .any(|id| id == SIMULATOR_WEBHOOK_ID)
    {
        problems.push(format!(
            "PAYPAL_WEBHOOK_ID lists {SIMULATOR_WEBHOOK_ID}, the id PayPal's public simulator \
             signs for: anyone could deliver sample events"
        ));
    }
    let timeout = settings.paypal.paypal_cert_timeout;
    let mounted = !settings.paypal.webhook_ids().is_empty()
        || settings
            .sources
            .iter()
            .any(|source| source.scheme == SourceScheme::Paypal && !source.is_built_in());
    if mounted && (timeout.is_zero() || timeout >= settings.request_timeout) {
        problems.push(
            "WEBHOOKD_PAYPAL_CERT_TIMEOUT must be above zero and below WEBHOOKD_REQUEST_TIMEOUT"
                .to_owned(),
        );
    }
    problems
}

/// How to reach the database, from `DATABASE_URL` and the pool's settings.
pub fn database_options(settings: &DatabaseSettings) -> anyhow::Result<db::Options> {
    Ok(db::Options {
        url: settings.url()?.to_owned().into(),
        pooler: match settings.db_pooler {
            DbPooler::None => db::Pooler::None,
            DbPooler::Transaction => db::Pooler::Transaction,
        },
        // Empty (as `${VAR:-}` in compose files gives) is unset.
        direct_url: non_empty(&settings.direct_database_url),
        max_connections: settings.db_max_connections,
        acquire_timeout: settings.db_acquire_timeout,
        statement_timeout: settings.db_statement_timeout,
    })
}

/// The pool of the configured database (opened lazily).
pub fn pool(settings: &DatabaseSettings) -> anyhow::Result<PgPool> {
    db::pool(&database_options(settings)?)
}

/// With `WEBHOOKD_DB_POOLER` unset (`none`), fails with the fix when
/// `pool`'s connections reach Postgres through a transaction pooler
/// ([`db::detection::require_sessions`]: two connections, a few round
/// trips); in transaction mode there is nothing to find.
pub async fn require_sessions(settings: &DatabaseSettings, pool: &PgPool) -> anyhow::Result<()> {
    match settings.db_pooler {
        DbPooler::None => db::detection::require_sessions(&pool.connect_options()).await,
        DbPooler::Transaction => Ok(()),
    }
}

/// Applies pending migrations to the configured database.
pub async fn migrate(settings: &DatabaseSettings) -> anyhow::Result<()> {
    db::migrate(&database_options(settings)?).await
}

/// The group commit's settings from the configuration.
pub fn batch_settings(settings: &ServeSettings) -> BatchSettings {
    BatchSettings {
        max_events: settings.batch_max_events as usize,
        concurrency: settings.batch_concurrency as usize,
    }
}

/// The connection limits from the settings, with the connection cap held
/// below the open-file limit (raised to its hard limit first), less the
/// files the pool, the drainer's sink and the process itself need.
pub(super) fn connection_limits(settings: &ServeSettings, pool: &PgPool) -> ConnectionLimits {
    let configured = &settings.connections;
    let open_files = serve::raise_open_file_limit();
    let mut reserved = serve::RESERVED_FILES + u64::from(pool.options().get_max_connections());
    if settings.role.drains() {
        reserved += settings.outbox.outbox_concurrency as u64;
    }
    let max_connections =
        serve::effective_max_connections(configured.max_connections, open_files, reserved);
    if max_connections < configured.max_connections {
        tracing::warn!(
            configured = configured.max_connections,
            effective = max_connections,
            open_files,
            reserved,
            "WEBHOOKD_MAX_CONNECTIONS held below the open-file limit"
        );
    } else {
        tracing::info!(max_connections, open_files, reserved, "connection limit");
    }
    ConnectionLimits {
        header_read_timeout: configured.header_read_timeout,
        write_timeout: configured.write_timeout,
        max_header_bytes: usize::try_from(configured.max_header_bytes).unwrap_or(usize::MAX),
        max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
        with_peer_address: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Database settings that pass validation.
    fn database() -> DatabaseSettings {
        DatabaseSettings {
            database_url: Some("postgres://localhost/webhookd".to_owned().into()),
            db_pooler: DbPooler::None,
            direct_database_url: None,
            db_max_connections: 4,
            db_acquire_timeout: Duration::from_secs(1),
            db_statement_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn each_sinks_problem_is_said_with_its_own_variables() {
        use crate::config::{SinkEntry, Topics};
        let entry = |name: &str, url: &str| SinkEntry {
            name: name.to_owned(),
            url: Some(url.to_owned().into()),
            secret: None,
            topics: Topics::all(),
        };
        let mut settings = ServeSettings::default();
        settings.outbox.sinks = vec![
            entry("billing", "https://billing.example/hooks"),
            entry("ops", "ftp://ops.example"),
            entry("events", "nats://127.0.0.1:4222?stream=S"),
        ];
        let error = validate(&settings, &database()).unwrap_err().to_string();
        for problem in [
            "WEBHOOKD_SINK_BILLING_URL: an HTTP sink needs its secret (WEBHOOKD_SINK_BILLING_SECRET)",
            "WEBHOOKD_SINK_OPS_URL: the sink's URL must be",
        ] {
            assert!(error.contains(problem), "{problem} missing from: {error}");
        }
        assert!(!error.contains("WEBHOOKD_SINK_EVENTS_URL"), "{error}");
        assert!(!error.contains("ops.example"), "no URL is shown: {error}");
    }

    #[test]
    fn every_problem_of_the_configuration_is_reported_at_once() {
        let mut settings = ServeSettings::default();
        settings.outbox.sink_url = Some("https://example.com/hook".to_owned().into());
        settings.outbox.outbox_lease = settings.outbox.sink_timeout;
        settings.admin.admin_listen = Some(crate::config::AdminListen(Some(settings.listen)));
        settings.admin.admin_token = crate::config::AdminToken::new("hunter2");
        settings.admin.admin_session_ttl = Duration::from_secs(5);
        let database = DatabaseSettings {
            database_url: None,
            ..database()
        };
        let error = validate(&settings, &database).unwrap_err().to_string();
        for problem in [
            "DATABASE_URL is not set",
            "WEBHOOKD_SINK_URL: an HTTP sink needs its secret (WEBHOOKD_SINK_SECRET)",
            "WEBHOOKD_OUTBOX_LEASE must exceed WEBHOOKD_SINK_TIMEOUT",
            "WEBHOOKD_ADMIN_LISTEN is the same address as WEBHOOKD_LISTEN",
            "WEBHOOKD_ADMIN_TOKEN is too short (7 characters)",
            "WEBHOOKD_ADMIN_SESSION_TTL must be at least 1m",
        ] {
            assert!(error.contains(problem), "{problem} missing from: {error}");
        }
        assert!(
            !error.contains("example.com") && !error.contains("hunter2"),
            "no setting's value is shown: {error}"
        );
    }

    #[test]
    fn paypal_s_simulator_id_and_an_unusable_certificate_timeout_are_refused() {
        let mut settings = ServeSettings::default();
        settings.paypal.paypal_webhook_id = "8PT597110X687430LKGECATA, WEBHOOK_ID".into();
        settings.paypal.paypal_cert_timeout = settings.request_timeout;
        let problems = paypal_problems(&settings).join("\n");
        assert!(problems.contains("simulator"), "{problems}");
        assert!(
            problems.contains("WEBHOOKD_PAYPAL_CERT_TIMEOUT"),
            "{problems}"
        );
        settings.paypal.paypal_webhook_id = "8PT597110X687430LKGECATA".into();
        settings.paypal.paypal_cert_timeout = Duration::from_secs(5);
        assert!(paypal_problems(&settings).is_empty());
        // Not mounted: its timeout does not matter.
        settings.paypal.paypal_webhook_id = String::new();
        settings.paypal.paypal_cert_timeout = Duration::ZERO;
        assert!(paypal_problems(&settings).is_empty());
    }

    #[test]
    fn validation_creates_no_certificate_directory_and_refuses_an_open_one() {
        use std::os::unix::fs::PermissionsExt;
        let database = database();
        let base = std::env::temp_dir().join(format!("webhookd-validate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let mut settings = ServeSettings::default();
        settings.paypal.paypal_webhook_id = "8PT597110X687430LKGECATA".into();
        settings.paypal.paypal_cert_dir = Some(base.join("certs"));
        validate(&settings, &database).unwrap();
        assert!(!base.exists(), "validation wrote nothing");
        std::fs::create_dir_all(base.join("certs")).unwrap();
        std::fs::set_permissions(base.join("certs"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let error = validate(&settings, &database).unwrap_err().to_string();
        assert!(error.contains("writable by others"), "{error}");
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn the_defaults_are_valid() {
        let database = database();
        validate(&ServeSettings::default(), &database).unwrap();
    }
}
