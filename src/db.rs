//! The connection pool, embedded migrations, and the one place where database
//! errors are classified (by SQLSTATE, never by message text).

use std::sync::OnceLock;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Postgres, Transaction};

use secrecy::{ExposeSecret, SecretString};

/// The migrations in `migrations/`, compiled into the binary.
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// The BEGIN of a read that looks things up for a person (the console,
/// `webhookd explain`), in one round trip as the ingest engine's BEGIN:
/// - planned for its parameters every time, never from a cached generic
///   plan: a statement with optional filters (`$1 is null or column = $1`)
///   has a generic plan that can neither fold a filter left out nor weigh a
///   given one against the column's statistics;
/// - never JIT-compiled: its plans are index lookups, often estimated at
///   far more rows than they meet, and compiling them took longer than
///   running them (a second and more at 5 million events).
pub const BEGIN_LOOKUP: &str =
    "begin read only; set local plan_cache_mode = force_custom_plan; set local jit = off";

/// What sits between webhookd and Postgres.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pooler {
    /// Nothing, or a pooler in session mode: each connection is one
    /// Postgres session for as long as it lasts.
    #[default]
    None,
    /// A pooler in transaction mode (PgBouncer's `pool_mode = transaction`
    /// and the poolers of managed offerings): a connection is one session
    /// only from BEGIN to COMMIT, and another client's between
    /// transactions. So webhookd sends no startup parameter but those a
    /// pooler accepts; runs every statement inside a transaction and
    /// prepares it there, never reusing it in another transaction; sets
    /// its settings with `SET LOCAL` at each BEGIN; takes only
    /// transaction-scoped locks; and leaves whatever needs a session
    /// (migrations, LISTEN) to the direct URL, or goes without.
    Transaction,
}

/// How to reach the database and size the pool.
#[derive(Debug, Clone)]
pub struct Options {
    /// A Postgres connection string: it may hold a password.
    pub url: SecretString,
    /// What `url` reaches the database through.
    pub pooler: Pooler,
    /// A connection string that reaches Postgres itself, not through a
    /// transaction pooler, for the work that needs a session: migrations
    /// and LISTEN. Without a pooler, `url` is used for that.
    pub direct_url: Option<SecretString>,
    /// Most connections the pool opens (at least 1).
    pub max_connections: u32,
    /// How long a caller waits for a pooled connection.
    pub acquire_timeout: Duration,
    /// Postgres cancels any statement that runs longer, and ends any
    /// transaction left idle that long. Migrations are exempt.
    pub statement_timeout: Duration,
}

/// Opens the pool lazily: the server starts (and `/readyz` answers 503) even
/// while the database is still coming up.
pub fn pool(options: &Options) -> anyhow::Result<PgPool> {
    let millis = options.statement_timeout.as_millis().max(1);
    let connect = match options.pooler {
        Pooler::None => {
            let millis = millis.to_string();
            connect_options(&options.url, "DATABASE_URL")?.options([
                ("statement_timeout", millis.as_str()),
                ("idle_in_transaction_session_timeout", millis.as_str()),
            ])
        }
        Pooler::Transaction => {
            // Every transaction sets the timeouts for itself ([`begin`]):
            // a startup `options` parameter is refused by the pooler, and a
            // session `SET` would outlive the transaction on a server
            // connection that other clients use next.
            let _ = LOCAL_SETTINGS.set(format!(
                "set local statement_timeout = {millis}; \
                 set local idle_in_transaction_session_timeout = {millis}"
            ));
            pooled(connect_options(&options.url, "DATABASE_URL")?)
        }
    };
    Ok(PgPoolOptions::new()
        .max_connections(options.max_connections.max(1))
        // No round trip to ping each connection handed out: a broken one
        // fails its statement, which answers 503 (retried) and is replaced.
        .test_before_acquire(false)
        .acquire_timeout(options.acquire_timeout)
        .idle_timeout(Some(Duration::from_secs(300)))
        .connect_lazy_with(connect))
}

/// Connection options a transaction pooler accepts and whose statements
/// survive a change of server connection between transactions:
/// - no `extra_float_digits` startup parameter (PgBouncer refuses any it
///   does not track; webhookd stores no floating-point values);
/// - no statement cache. sqlx still names the statements of its query
///   macros (`sqlx_s_1`, `sqlx_s_2`, ... on each client connection), but
///   prepares each anew where it runs, inside its transaction, and never
///   looks for it again. What is left on the server connection after the
///   transaction (and could clash with another client's numbering there) is
///   cleared by the next transaction's BEGIN ([`begin_with`]).
fn pooled(options: PgConnectOptions) -> PgConnectOptions {
    options.extra_float_digits(None).statement_cache_capacity(0)
}

/// What each transaction sets for itself at BEGIN in a process whose pool
/// is a transaction pooler's: the timeouts a direct connection sets once, at
/// start-up. Set when such a pool is opened ([`pool`]); a process has one
/// database configuration, so one value serves all its pools.
static LOCAL_SETTINGS: OnceLock<String> = OnceLock::new();

/// Begins a transaction with `begin` (a `begin` statement, and `set local`
/// settings of its own), in one round trip. Every statement webhookd runs
/// with parameters runs inside one: behind a transaction pooler, a
/// statement outside a transaction can be prepared on one server connection
/// and bound on another's (sqlx parses and binds in two round trips, and
/// the pooler may hand the connection over in between).
///
/// Behind a transaction pooler, the same round trip also sets the timeouts
/// ([`LOCAL_SETTINGS`]) and, on a connection that caches no statement (as
/// a pooled one never does), clears the statements the server connection's
/// previous client left (`deallocate all`), which are named as ours are.
/// A connection that caches statements (a direct one) keeps them.
pub async fn begin_with(
    pool: &PgPool,
    begin: &'static str,
) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    let Some(local) = LOCAL_SETTINGS.get() else {
        return pool.begin_with(begin).await;
    };
    let conn = pool.acquire().await?;
    let clear = if conn.cached_statements_size() == 0 {
        "deallocate all; "
    } else {
        ""
    };
    // What `Pool::begin_with` does, on a connection looked at first.
    Transaction::begin(conn, Some(format!("{begin}; {clear}{local}").into())).await
}

/// Begins a read-write transaction ([`begin_with`]).
pub async fn begin(pool: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    begin_with(pool, "begin").await
}

/// Begins a read-only transaction ([`begin_with`]).
pub async fn read(pool: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    begin_with(pool, "begin read only").await
}

fn connect_options(url: &SecretString, name: &str) -> anyhow::Result<PgConnectOptions> {
    let options: PgConnectOptions = url
        .expose_secret()
        .parse()
        .map_err(|_| anyhow::anyhow!("{name} is not a valid Postgres connection string"))?;
    Ok(options.application_name("webhookd"))
}

/// The connection options of a session: the direct URL when one is set,
/// else the pool's own URL unless that is a transaction pooler's. `None`:
/// there is no session to be had.
pub fn session_options(options: &Options) -> anyhow::Result<Option<PgConnectOptions>> {
    match (&options.direct_url, options.pooler) {
        (Some(url), _) => Ok(Some(connect_options(url, "WEBHOOKD_DIRECT_DATABASE_URL")?)),
        (None, Pooler::None) => Ok(Some(connect_options(&options.url, "DATABASE_URL")?)),
        (None, Pooler::Transaction) => Ok(None),
    }
}

/// A pool of one session connection for LISTEN ([`session_options`]),
/// opened lazily; `None` when there is no session to be had.
pub fn session_pool(options: &Options) -> anyhow::Result<Option<PgPool>> {
    Ok(session_options(options)?.map(|connect| {
        PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(options.acquire_timeout)
            .connect_lazy_with(connect)
    }))
}

/// Applies pending migrations on a session of their own (sqlx holds a
/// session advisory lock while it migrates), free of the pool's statement
/// timeout.
pub async fn migrate(options: &Options) -> anyhow::Result<()> {
    let Some(connect) = session_options(options)? else {
        anyhow::bail!("{NO_SESSION_TO_MIGRATE}");
    };
    let mut conn = PgConnection::connect_with(&connect).await?;
    MIGRATOR.run(&mut conn).await?;
    conn.close().await?;
    Ok(())
}

/// Why migrations cannot run through a transaction pooler.
pub const NO_SESSION_TO_MIGRATE: &str = "migrations need a session, which a transaction pooler \
    does not give (WEBHOOKD_DB_POOLER=transaction): set WEBHOOKD_DIRECT_DATABASE_URL to a URL \
    of the database itself, or run `webhookd migrate` with DATABASE_URL on the database itself";

/// Whether every embedded migration has been applied successfully.
pub async fn migrations_applied(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let mut tx = read(pool).await?;
    let applied = sqlx::query_scalar!(
        r#"select exists (select 1 from _sqlx_migrations where version = $1 and success) as "applied!""#,
        latest
    )
    .fetch_one(&mut *tx)
    .await;
    match applied {
        Ok(applied) => {
            tx.commit().await?;
            Ok(applied)
        }
        // No migration table yet: nothing applied.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => Ok(false),
        Err(error) => Err(error),
    }
}

/// What a database error means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Worth retrying as is: the database is unavailable or busy, or the
    /// transaction lost a serialization race or a deadlock.
    Transient,
    /// A value from the event is what the database refuses (a number out of
    /// range, a value over a size limit, a check that fails): the same event
    /// fails the same way on every retry, so retrying is futile
    /// ([`Poison::of`], [`is_poison_sqlstate`]).
    Poison,
    /// Anything else: a bug or a broken invariant.
    Permanent,
}

pub fn classify(error: &sqlx::Error) -> Failure {
    match error {
        _ if is_connection_failure(error) => Failure::Transient,
        sqlx::Error::Database(db) => match db.code() {
            Some(code) if is_transient_sqlstate(&code) => Failure::Transient,
            Some(code) if is_poison_sqlstate(&code) => Failure::Poison,
            _ => Failure::Permanent,
        },
        _ => Failure::Permanent,
    }
}

/// The data errors that a value from the event causes: a string too long
/// for its column (22001), a number out of range (22003, a balance's
/// overflow among them), a time out of range (22008), text the database
/// cannot encode (22021, 22P05), an index row over the B-tree maximum
/// (54000, an id too long for a key), and a check constraint the values
/// fail (23514). Not the codes a bug in our own SQL or schema would raise
/// for every event alike (a bad cast 22P02, a missing not-null value
/// 23502), nor a unique violation, which can be a race a retry wins: those
/// stay errors, answered 5xx and noticed.
fn is_poison_sqlstate(code: &str) -> bool {
    matches!(
        code,
        "22001" | "22003" | "22008" | "22021" | "22P05" | "54000" | "23514"
    )
}

/// Why the database refused an event's data, for its `rejected` detail:
/// the SQLSTATE, its class and the constraint, never the server's message
/// (which may quote the hostile input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poison {
    pub sqlstate: String,
    pub constraint: Option<String>,
}

impl Poison {
    /// The poison in `error`, if that is what it is ([`Failure::Poison`]).
    pub fn of(error: &sqlx::Error) -> Option<Poison> {
        match error {
            sqlx::Error::Database(db) if classify(error) == Failure::Poison => Some(Poison {
                sqlstate: db.code().map(|code| code.into_owned()).unwrap_or_default(),
                constraint: db.constraint().map(str::to_owned),
            }),
            _ => None,
        }
    }

    /// The `rejected` detail: `{"reason": ..., "sqlstate": ...}`.
    pub fn detail(&self) -> serde_json::Value {
        serde_json::json!({ "reason": self.reason(), "sqlstate": self.sqlstate })
    }

    /// A sentence for the `rejected` reason.
    pub fn reason(&self) -> String {
        let what = match self.sqlstate.as_str() {
            "22003" => "a number out of range",
            "22001" => "a value too long for its column",
            "22008" => "a time out of range",
            "22021" | "22P05" => "text the database cannot encode",
            "54000" => "a value over a database size limit",
            _ => "a value that fails a check",
        };
        match &self.constraint {
            Some(constraint) => format!(
                "the database cannot store this event: {what} (SQLSTATE {}, constraint {constraint})",
                self.sqlstate
            ),
            None => format!(
                "the database cannot store this event: {what} (SQLSTATE {})",
                self.sqlstate
            ),
        }
    }
}

/// Whether `error` says the database cannot be reached or is going away
/// (rather than that this transaction failed): retrying at once is futile.
/// Always [`Failure::Transient`].
pub fn is_connection_failure(error: &sqlx::Error) -> bool {
    match error {
        // The connection is gone or garbled (a proxy that accepts and then
        // closes answers the TLS probe with nothing): a new one may work.
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| is_server_going_away(&code)),
        _ => false,
    }
}

/// Connection exceptions, insufficient resources, and a server shutting
/// down or starting up.
fn is_server_going_away(code: &str) -> bool {
    code.starts_with("08") || code.starts_with("53") || matches!(code, "57P01" | "57P02" | "57P03")
}

/// SQLSTATEs after which a clean retry of the whole transaction can succeed.
fn is_transient_sqlstate(code: &str) -> bool {
    is_server_going_away(code)
        || matches!(
            code,
            "40001" // serialization_failure
                | "40P01" // deadlock_detected
                | "55P03" // lock_not_available (lock_timeout)
                | "55000" // object_not_in_prerequisite_state (e.g. a standby still recovering)
                | "57014" // query_canceled (statement_timeout)
                | "25006" // read_only_sql_transaction (failover to a replica)
                // A named statement looked for on, or prepared twice on, a
                // server connection a transaction pooler handed over: only
                // when WEBHOOKD_DB_POOLER is not set to `transaction`
                // behind one. The next try may get another connection.
                | "26000" // invalid_sql_statement_name
                | "42P05" // duplicate_prepared_statement
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_sqlstates_are_recognised() {
        for code in [
            "40001", "40P01", "55P03", "57014", "57P01", "08006", "53300",
        ] {
            assert!(is_transient_sqlstate(code), "{code}");
        }
        for code in ["23505", "23503", "42P01", "P0001", "22P02"] {
            assert!(!is_transient_sqlstate(code), "{code}");
        }
    }

    #[test]
    fn what_a_transaction_pooler_answers_is_transient() {
        // PgBouncer's own errors (a refused startup parameter, no server
        // connection in time, too many clients, shutting down) are 08P01,
        // 53300 or 57P01; a named statement on the wrong server connection
        // is 26000 or 42P05.
        for code in ["08P01", "53300", "57P01", "26000", "42P05"] {
            assert_eq!(classify(&refused(code)), Failure::Transient, "{code}");
        }
        assert!(is_connection_failure(&refused("08P01")));
        assert!(!is_connection_failure(&refused("26000")));
    }

    #[test]
    fn data_the_database_refuses_is_poison_and_a_race_is_not() {
        for code in [
            "22001", "22003", "22008", "22021", "22P05", "54000", "23514",
        ] {
            assert!(
                is_poison_sqlstate(code) && !is_transient_sqlstate(code),
                "{code}"
            );
        }
        // Our own bugs stay errors: a bad cast, a missing value, a race.
        for code in [
            "22P02", "22012", "23502", "23505", "40001", "57014", "42P01", "54001",
        ] {
            assert!(!is_poison_sqlstate(code), "{code}");
        }
    }

    #[test]
    fn a_server_not_ready_or_not_accepting_connections_is_transient() {
        // Not in its prerequisite state, shutting down (admin, crash),
        // starting up, and every connection exception: a retry can succeed,
        // so ingest answers 503 with Retry-After.
        for code in [
            "55000", "57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004",
        ] {
            assert!(is_transient_sqlstate(code), "{code}");
            assert!(!is_poison_sqlstate(code), "{code}");
        }
        // Only 55000 of its class: 55006 (object in use) is not a moment's wait.
        assert!(!is_transient_sqlstate("55006"));
        assert_eq!(classify(&refused("55000")), Failure::Transient);
        assert_eq!(classify(&refused("57P03")), Failure::Transient);
        assert!(is_connection_failure(&refused("08006")));
        assert_eq!(classify(&refused("22003")), Failure::Poison);
        assert_eq!(classify(&refused("42P01")), Failure::Permanent);
    }

    /// A database error with `code`, as the server would send it.
    fn refused(code: &'static str) -> sqlx::Error {
        #[derive(Debug)]
        struct Refused(&'static str);
        impl std::fmt::Display for Refused {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "SQLSTATE {}", self.0)
            }
        }
        impl std::error::Error for Refused {}
        impl sqlx::error::DatabaseError for Refused {
            fn message(&self) -> &str {
                "refused"
            }
            fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
                Some(self.0.into())
            }
            fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
                self
            }
            fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
                self
            }
            fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
                self
            }
            fn kind(&self) -> sqlx::error::ErrorKind {
                sqlx::error::ErrorKind::Other
            }
        }
        sqlx::Error::Database(Box::new(Refused(code)))
    }

    #[test]
    fn pool_timeouts_are_transient() {
        assert_eq!(classify(&sqlx::Error::PoolTimedOut), Failure::Transient);
        assert_eq!(
            classify(&sqlx::Error::Protocol("unexpected response".into())),
            Failure::Transient
        );
        assert_eq!(classify(&sqlx::Error::RowNotFound), Failure::Permanent);
        assert_eq!(Poison::of(&sqlx::Error::RowNotFound), None);
        assert!(is_connection_failure(&sqlx::Error::PoolTimedOut));
        assert!(!is_connection_failure(&sqlx::Error::RowNotFound));
        // A lost statement or a deadlock is worth retrying, but the database is there.
        assert!(is_transient_sqlstate("57014") && !is_server_going_away("57014"));
        assert!(is_transient_sqlstate("40P01") && !is_server_going_away("40P01"));
        assert!(is_server_going_away("57P01") && is_server_going_away("08006"));
    }
}
