//! What a database error means (by SQLSTATE, never by message text): the
//! one place database errors are classified.

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

/// The SQLSTATE of `error` when it is one that only a transaction pooler
/// causes on a connection that caches statements (`WEBHOOKD_DB_POOLER`
/// unset): a named statement looked for on a server session that never
/// prepared it (26000, invalid_sql_statement_name), or prepared on one that
/// holds another client's statement of that name (42P05,
/// duplicate_prepared_statement). Directly on Postgres, or through a
/// session pooler, a connection is one session for as long as it lasts and
/// neither can happen. Still [`Failure::Transient`]: the next try may get
/// another server connection.
pub fn statement_of_another_session(error: &sqlx::Error) -> Option<&'static str> {
    match error {
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("26000") => Some("26000"),
            Some("42P05") => Some("42P05"),
            _ => None,
        },
        _ => None,
    }
}

/// Connection exceptions, insufficient resources, a server shutting down or
/// starting up, and a session the server ended for idling (in a
/// transaction, 25P03, or at all, 57P05): a transaction begun by a request
/// that gave up while its BEGIN was in flight is left open on its pooled
/// connection until Postgres ends it, and the next user of that
/// connection gets the error.
fn is_server_going_away(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || matches!(code, "57P01" | "57P02" | "57P03" | "57P05" | "25P03")
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
                // behind one ([`statement_of_another_session`]). The next
                // try may get another connection.
                | "26000" // invalid_sql_statement_name
                | "42P05" // duplicate_prepared_statement
                // The same, when the other session's statement of that name
                // takes as many parameters of other types: every query is
                // checked against the schema when webhookd is built, so in
                // its own session a parameter never binds with another type.
                | "42804" // datatype_mismatch
        )
}

/// A database error with `code`, as the server would send it (for tests).
#[cfg(test)]
pub(super) fn refused(code: &'static str) -> sqlx::Error {
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
        // is 26000 or 42P05, or 42804 when a statement of that name there
        // takes other parameter types.
        for code in [
            "08P01", "53300", "57P01", "26000", "42P05", "42804", "25P03", "57P05",
        ] {
            assert_eq!(classify(&refused(code)), Failure::Transient, "{code}");
        }
        assert!(is_connection_failure(&refused("08P01")));
        assert!(is_connection_failure(&refused("25P03")));
        assert!(!is_connection_failure(&refused("26000")));
    }

    #[test]
    fn only_a_statement_missing_from_or_already_in_its_session_says_transaction_pooler() {
        assert_eq!(
            statement_of_another_session(&refused("26000")),
            Some("26000")
        );
        assert_eq!(
            statement_of_another_session(&refused("42P05")),
            Some("42P05")
        );
        // What a pooler or an outage says otherwise, and our own bugs.
        for code in [
            "08P01", "57P01", "53300", "42P01", "42601", "23505", "34000",
        ] {
            assert_eq!(statement_of_another_session(&refused(code)), None, "{code}");
        }
        assert_eq!(
            statement_of_another_session(&sqlx::Error::PoolTimedOut),
            None
        );
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
