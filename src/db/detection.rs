//! A transaction pooler behind `DATABASE_URL` while `WEBHOOKD_DB_POOLER`
//! says there is none. The pool then caches statements on connections that
//! are not sessions: a statement prepared on one server connection is
//! looked for on another (SQLSTATE 26000) or prepared again where another
//! client's statement holds its name (42P05), and every transaction risks
//! failing. It is found at start-up by a probe ([`require_sessions`]), and
//! at run time by the first such error ([`notice`]), after which the
//! process stays not ready until it is restarted ([`found`]): the cause is
//! the configuration, which no retry changes.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, Row};

use super::failure::statement_of_another_session;

/// What to do about it, in one line.
pub const FIX: &str = "set WEBHOOKD_DB_POOLER=transaction (and WEBHOOKD_DIRECT_DATABASE_URL \
    for migrations and LISTEN)";

/// How the probe saw that connections are not sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// Two client connections, open at once, ran on one server session.
    Shared { backend: i32 },
    /// One client connection ran on two server sessions, one after the other.
    Moved { from: i32, to: i32 },
}

impl std::fmt::Display for Evidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Evidence::Shared { backend } => write!(
                f,
                "two of its connections ran on one server session, backend {backend}"
            ),
            Evidence::Moved { from, to } => write!(
                f,
                "one of its connections moved from server session {from} to {to}"
            ),
        }
    }
}

/// Fails, with the fix, when connections made with `connect` (the pool's
/// options, `WEBHOOKD_DB_POOLER` unset) reach Postgres through a transaction
/// (or statement) pooler ([`probe`]).
pub async fn require_sessions(connect: &PgConnectOptions) -> anyhow::Result<()> {
    match probe(connect).await {
        Ok(None) => Ok(()),
        Ok(Some(evidence)) => anyhow::bail!(
            "DATABASE_URL reaches Postgres through a transaction pooler ({evidence}), \
             though WEBHOOKD_DB_POOLER is none: {FIX}"
        ),
        Err(error) => Err(anyhow::Error::new(error).context("cannot connect to DATABASE_URL")),
    }
}

/// Whether two connections made with `connect` are sessions, or a pooler
/// hands server sessions between them: `Some` with what proves the pooler.
///
/// It opens two connections, reads `pg_backend_pid()` (the server
/// session's) on the first, then on the second once, the first again, the
/// second twice and the first again, and closes both: two connects and at
/// most six round trips. Directly on Postgres, or through a session
/// pooler, each connection is one session all along, so the second never
/// shows the first's backend and the first's never changes: no false
/// positive. A transaction pooler gives the first's server session back
/// after each read. PgBouncer by default lends the session given back last
/// (LIFO), which the second's first read gets. With `server_round_robin =
/// 1` it lends the one idle longest: the second gets the first's session
/// once it has read as often as sessions are idle, and otherwise the
/// first's next read gets another session, unless exactly one more is idle
/// than the second read since (two after its one read, three after its
/// two: never both). Other clients of the pooler lending sessions at the
/// same moment can hide it; the run-time check ([`notice`]) is the second
/// line.
///
/// The reads run outside any transaction, the one exception to the rule
/// that every statement runs inside one (`db::begin_with`): inside one,
/// the pooler would keep the session for the whole transaction and show
/// nothing. That is safe here. Each read is one simple-protocol round
/// trip (no prepared statement, nothing left on the session) that changes
/// nothing, and with `WEBHOOKD_DB_POOLER` unset the connection is meant to
/// be a session, where a statement outside a transaction is fine.
pub async fn probe(connect: &PgConnectOptions) -> Result<Option<Evidence>, sqlx::Error> {
    let mut first = PgConnection::connect_with(connect).await?;
    let mut second = match PgConnection::connect_with(connect).await {
        Ok(second) => second,
        Err(error) => {
            let _ = first.close().await;
            return Err(error);
        }
    };
    let found = compare(&mut first, &mut second).await;
    let _ = tokio::join!(first.close(), second.close());
    found
}

/// The reads of [`probe`], stopping at the first proof.
async fn compare(
    first: &mut PgConnection,
    second: &mut PgConnection,
) -> Result<Option<Evidence>, sqlx::Error> {
    let held = backend(first).await?;
    for reads in [1, 2] {
        for _ in 0..reads {
            let backend = backend(second).await?;
            if backend == held {
                return Ok(Some(Evidence::Shared { backend }));
            }
        }
        let now = backend(first).await?;
        if now != held {
            return Ok(Some(Evidence::Moved {
                from: held,
                to: now,
            }));
        }
    }
    Ok(None)
}

/// The connection's server session, in one round trip outside any
/// transaction (the simple protocol: nothing prepared).
async fn backend(conn: &mut PgConnection) -> Result<i32, sqlx::Error> {
    sqlx::raw_sql("select pg_backend_pid()")
        .fetch_one(conn)
        .await?
        .try_get(0)
}

/// The run-time check of this process (`serve` arms it, [`watch`]).
static WATCH: Watch = Watch::new();

/// From now on, the first error that only a transaction pooler causes
/// ([`notice`]) makes this process not ready for good. `serve` calls it
/// once the probe found sessions, with `WEBHOOKD_DB_POOLER` unset.
pub fn watch() {
    WATCH.arm();
}

/// Looks at a database error: the first 26000 or 42P05 once [`watch`] was
/// called is logged, once, with the fix, and [`found`] says so from then on.
pub fn notice(error: &sqlx::Error) {
    WATCH.notice(error);
}

/// Why this process is not ready, once [`notice`] saw a transaction pooler.
pub fn found() -> Option<&'static str> {
    WATCH.found()
}

/// An armed-or-not latch: a value of its own for each test.
struct Watch {
    armed: AtomicBool,
    found: OnceLock<String>,
}

impl Watch {
    const fn new() -> Self {
        Watch {
            armed: AtomicBool::new(false),
            found: OnceLock::new(),
        }
    }

    fn arm(&self) {
        self.armed.store(true, Ordering::Relaxed);
    }

    fn notice(&self, error: &sqlx::Error) {
        if !self.armed.load(Ordering::Relaxed) {
            return;
        }
        let Some(sqlstate) = statement_of_another_session(error) else {
            return;
        };
        let what = if sqlstate == "26000" {
            "a prepared statement missing from its server session"
        } else {
            "a prepared statement already in its server session"
        };
        let reason = format!(
            "DATABASE_URL reaches Postgres through a transaction pooler (SQLSTATE {sqlstate}, \
             {what}), though WEBHOOKD_DB_POOLER is none: {FIX}"
        );
        if self.found.set(reason).is_ok() {
            tracing::error!(
                sqlstate,
                "{}; not ready until restarted",
                self.found().unwrap_or_default()
            );
        }
    }

    fn found(&self) -> Option<&str> {
        self.found.get().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::super::failure::refused as lost;
    use super::*;

    #[test]
    fn the_first_lost_statement_after_watch_says_the_fix_and_stays() {
        let watch = Watch::new();
        // Not armed (a command, or a pool in transaction mode): nothing.
        watch.notice(&lost("26000"));
        assert_eq!(watch.found(), None);
        watch.arm();
        watch.notice(&sqlx::Error::PoolTimedOut);
        watch.notice(&lost("40001"));
        assert_eq!(watch.found(), None, "other errors say nothing of a pooler");
        watch.notice(&lost("42P05"));
        let found = watch.found().expect("42P05 is a pooler's").to_owned();
        assert!(found.contains("SQLSTATE 42P05"), "{found}");
        assert!(found.contains(FIX), "{found}");
        assert!(!found.contains('\n'), "one line: {found}");
        // The first reason stays: later errors change nothing.
        watch.notice(&lost("26000"));
        assert_eq!(watch.found(), Some(found.as_str()));
    }

    #[test]
    fn the_evidence_names_server_sessions_only() {
        assert_eq!(
            Evidence::Shared { backend: 7 }.to_string(),
            "two of its connections ran on one server session, backend 7"
        );
        assert_eq!(
            Evidence::Moved { from: 7, to: 8 }.to_string(),
            "one of its connections moved from server session 7 to 8"
        );
    }
}
