//! The connection pool and how transactions begin on it, the session for
//! what needs one, embedded migrations, (`failure`) the one place where
//! database errors are classified (by SQLSTATE, never by message text), and
//! (`detection`) a transaction pooler found where none is configured.

use std::sync::OnceLock;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::query::Map;
use sqlx::{Connection, Postgres, Transaction};

use secrecy::{ExposeSecret, SecretString};

pub mod detection;
mod failure;
pub mod partitions;
mod timestamp;

pub use failure::{Failure, Poison, classify, is_connection_failure, statement_of_another_session};
pub use timestamp::Timestamp;

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
            // Every transaction sets the timeouts for itself ([`begin_with`]):
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
/// (sqlx prepares each, with parameters or without) runs inside one: behind
/// a transaction pooler, a statement outside a transaction can be prepared
/// on one server connection and bound on another's (sqlx parses and binds
/// in two round trips, and the pooler may hand the connection over in
/// between). The one exception is the start-up probe for a pooler nobody
/// configured ([`detection::probe`]), whose reads must be handed over to be
/// seen, and prepare nothing.
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

/// Begins a read-only transaction ([`begin_with`]), for reads of more than
/// one statement; a read of one is [`read_only`]'s.
pub async fn read(pool: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    begin_with(pool, READ_ONLY).await
}

const READ_ONLY: &str = "begin read only";

/// A read of one statement, in a read-only transaction of its own: begun
/// ([`begin_with`]), the statement run, committed.
#[derive(Debug, Clone, Copy)]
pub struct Read<'p> {
    pool: &'p PgPool,
    begin: &'static str,
}

/// A read that begins as [`read`] does.
pub fn read_only(pool: &PgPool) -> Read<'_> {
    Read {
        pool,
        begin: READ_ONLY,
    }
}

/// A read that looks things up for a person ([`BEGIN_LOOKUP`]).
pub fn lookup(pool: &PgPool) -> Read<'_> {
    Read {
        pool,
        begin: BEGIN_LOOKUP,
    }
}

impl Read<'_> {
    /// Every row of `query` (a `query!` or `query_as!`).
    pub async fn all<O, F>(
        self,
        query: Map<'_, Postgres, F, PgArguments>,
    ) -> Result<Vec<O>, sqlx::Error>
    where
        F: FnMut(PgRow) -> Result<O, sqlx::Error> + Send,
        O: Send + Unpin,
    {
        let mut tx = begin_with(self.pool, self.begin).await?;
        let rows = query.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows)
    }

    /// The row of `query`, if it finds one.
    pub async fn optional<O, F>(
        self,
        query: Map<'_, Postgres, F, PgArguments>,
    ) -> Result<Option<O>, sqlx::Error>
    where
        F: FnMut(PgRow) -> Result<O, sqlx::Error> + Send,
        O: Send + Unpin,
    {
        let mut tx = begin_with(self.pool, self.begin).await?;
        let row = query.fetch_optional(&mut *tx).await?;
        tx.commit().await?;
        Ok(row)
    }

    /// The one row of `query` (an aggregate's): [`sqlx::Error::RowNotFound`]
    /// without one.
    pub async fn one<O, F>(self, query: Map<'_, Postgres, F, PgArguments>) -> Result<O, sqlx::Error>
    where
        F: FnMut(PgRow) -> Result<O, sqlx::Error> + Send,
        O: Send + Unpin,
    {
        self.optional(query).await?.ok_or(sqlx::Error::RowNotFound)
    }
}

/// Runs one writing statement (`query`, a `query!`) in a transaction of its
/// own ([`begin`]), committed: the rows it affected. What a batch of
/// retention does, each batch short so that it never holds ingest up.
pub async fn write_alone(
    pool: &PgPool,
    query: sqlx::query::Query<'_, Postgres, PgArguments>,
) -> Result<u64, sqlx::Error> {
    let mut tx = begin(pool).await?;
    let result = query.execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(result.rows_affected())
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

/// The `application_name` of the session that LISTENs.
pub const LISTEN_APPLICATION_NAME: &str = "webhookd-listen";

/// A pool of one session connection for LISTEN ([`session_options`]),
/// opened lazily; `None` when there is no session to be had.
pub fn session_pool(options: &Options) -> anyhow::Result<Option<PgPool>> {
    Ok(session_options(options)?.map(|connect| {
        PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(options.acquire_timeout)
            // Told apart from the pool's connections in pg_stat_activity.
            .connect_lazy_with(connect.application_name(LISTEN_APPLICATION_NAME))
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
    of the database itself, or run `webhookd migrate` with DATABASE_URL on the database itself \
    and WEBHOOKD_DB_POOLER unset";

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

/// Moves `sequence` on to the time now in microseconds, unless it is past
/// it already. Ids it hands out then never repeat those a database handed
/// out after the backup it was restored from: each start moves the
/// sequence past every id given since the last, as long as fewer than a
/// million are given a second (far above what webhookd writes). Ids stay
/// unique and increasing meanwhile: the sequence only moves forward, one
/// process at a time (a lock of the transaction's: two processes starting
/// at once could otherwise each set it to its own reading of the clock,
/// the later reading first). The database's clock decides: a database
/// restored onto a server whose clock is behind the old one's is moved on
/// only once that clock has caught up.
pub async fn sequence_past_now(pool: &PgPool, sequence: &str) -> Result<(), sqlx::Error> {
    let mut tx = begin(pool).await?;
    sqlx::query(
        "select pg_advisory_xact_lock(hashtext('webhookd.sequence_past_now'), hashtext($1))",
    )
    .bind(sequence)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "select setval($1::regclass, now_us)
         from (select (extract(epoch from clock_timestamp()) * 1000000)::bigint as now_us) as t
         where coalesce(pg_sequence_last_value($1::regclass), 0) < now_us",
    )
    .bind(sequence)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// How the migrations a database has applied compare with this binary's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Migrations {
    /// This binary's migrations the database has not applied: version and
    /// description.
    pub pending: Vec<(i64, String)>,
    /// Applied and marked failed (a migration that stopped half way).
    pub failed: Vec<i64>,
    /// Applied, and changed since in this binary (their checksum differs).
    pub changed: Vec<i64>,
    /// Applied, and unknown to this binary: a newer webhookd migrated.
    pub unknown: Vec<i64>,
}

/// How `pool`'s database stands with this binary's migrations.
pub async fn migrations(pool: &PgPool) -> Result<Migrations, sqlx::Error> {
    let query = sqlx::query_as::<_, (i64, bool, Vec<u8>)>(
        "select version, success, checksum from _sqlx_migrations order by version",
    );
    let mut tx = read(pool).await?;
    let applied = match query.fetch_all(&mut *tx).await {
        Ok(applied) => applied,
        // No migration table yet: nothing applied.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => Vec::new(),
        Err(error) => return Err(error),
    };
    drop(tx);
    let mut state = Migrations::default();
    for migration in MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
    {
        match applied
            .iter()
            .find(|(version, ..)| *version == migration.version)
        {
            None => (state.pending).push((migration.version, migration.description.to_string())),
            Some((_, false, _)) => state.failed.push(migration.version),
            Some((.., checksum)) if *checksum != *migration.checksum => {
                state.changed.push(migration.version);
            }
            Some(_) => {}
        }
    }
    state.unknown = (applied.iter())
        .map(|(version, ..)| *version)
        .filter(|version| MIGRATOR.iter().all(|m| m.version != *version))
        .collect();
    Ok(state)
}

/// `items` in the runs a statement that writes a row per item can take:
/// all of them at once when no two have the same `key`, else one at a time
/// (one statement may not change a row twice); none for no items.
pub fn distinct_runs<T, K: Ord>(items: &[T], key: impl Fn(&T) -> K) -> Vec<&[T]> {
    if items.is_empty() {
        return Vec::new();
    }
    let mut keys: Vec<K> = items.iter().map(key).collect();
    keys.sort_unstable();
    keys.dedup();
    match keys.len() == items.len() {
        true => vec![items],
        false => items.chunks(1).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::distinct_runs;

    #[test]
    fn distinct_items_are_one_run_and_any_repeat_makes_runs_of_one() {
        let none: [(u8, u8); 0] = [];
        assert!(distinct_runs(&none, |x| *x).is_empty());
        let distinct = [(1, 'a'), (2, 'b'), (3, 'a')];
        assert_eq!(distinct_runs(&distinct, |(k, _)| *k), vec![&distinct[..]]);
        let runs = distinct_runs(&distinct, |(_, k)| *k);
        assert_eq!(
            runs,
            vec![&distinct[0..1], &distinct[1..2], &distinct[2..3]]
        );
    }
}
