//! What a database error means for the request that met it: the one place that reads SQLSTATEs
//! and sqlx's error kinds.

/// The kinds of database error a request can meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The connection itself is gone: the server closed it, went away, or is shutting down.
    ConnectionLost,
    /// The server refuses more connections for now (SQLSTATE 53300).
    Overloaded,
    /// Not the request's fault and worth retrying: no connection in time, out of resources, a
    /// serialization failure or deadlock.
    Unavailable,
    /// The schema is behind this binary: a table, column or function it uses does not exist.
    NotMigrated,
    /// The statement itself failed: a bug or a broken invariant, not something a retry fixes.
    Statement,
}

impl Failure {
    pub fn of(error: &sqlx::Error) -> Self {
        match error {
            sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => {
                Self::ConnectionLost
            }
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => {
                Self::Unavailable
            }
            sqlx::Error::Database(db) => match db.code().as_deref() {
                // Class 08: connection exception; 57P01-57P03: admin or crash shutdown, cannot
                // connect now.
                Some(code) if code.starts_with("08") || code.starts_with("57P") => {
                    Self::ConnectionLost
                }
                Some("53300") => Self::Overloaded,
                // 25006: the server no longer takes writes, a primary demoted under us: its
                // connections must go, and a new one finds the new primary (`servers.rs`).
                Some("25006") => Self::ConnectionLost,
                // Undefined table, column, function.
                Some("42P01" | "42703" | "42883") => Self::NotMigrated,
                // 53xxx (insufficient resources), 40001/40P01 (serialization failure, deadlock),
                // and a server that refuses our credentials (28xxx) or lacks the database (3D000)
                // until an operator acts: none says the request was wrong.
                Some(code)
                    if code.starts_with("53")
                        || code.starts_with("28")
                        || matches!(code, "40001" | "40P01" | "3D000") =>
                {
                    Self::Unavailable
                }
                _ => Self::Statement,
            },
            _ => Self::Statement,
        }
    }

    /// Whether trying again later may succeed (answered 503, not 500).
    pub fn is_transient(self) -> bool {
        self != Self::Statement
    }
}

/// What an operator must run when `error` says the database itself is missing or behind this
/// binary; `None` for every other error (those pass without anybody's help, or are bugs).
pub fn advice(error: &sqlx::Error) -> Option<&'static str> {
    let missing = error
        .as_database_error()
        .is_some_and(|db| db.code().as_deref() == Some("3D000"));
    if missing {
        Some(
            "the database does not exist: create and migrate it with `payments-api migrate` (or start with `payments-api serve --migrate`)",
        )
    } else if Failure::of(error) == Failure::NotMigrated {
        Some(
            "the database is not migrated: run `payments-api migrate` (or start with `payments-api serve --migrate`)",
        )
    } else {
        None
    }
}

/// Classifies an error that code running a statement has just seen, and acts on what it says about
/// the pool: a lost connection means its siblings are likely dead too (a database restart closes
/// them all), so for a while every pooled connection is checked before use.
pub fn observe(error: &sqlx::Error) -> Failure {
    let failure = Failure::of(error);
    if failure == Failure::ConnectionLost {
        super::pool::distrust_idle_connections();
    }
    // A demoted primary still answers pings: every connection opened so far may be on it.
    if error
        .as_database_error()
        .is_some_and(|db| db.code().as_deref() == Some("25006"))
    {
        super::pool::replace_connections_opened_until_now();
    }
    failure
}
