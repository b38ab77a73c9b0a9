//! The servers a `DATABASE_URL` names. Like libpq, it may list several hosts
//! (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`): connections try them in
//! order and, with `read-write`, keep only a server that takes writes, so after a failover the
//! pool finds the new primary by itself (`docs/ha.md`).

use std::str::FromStr;

use anyhow::{Context, bail};
use sqlx::{Connection, PgConnection, postgres::PgConnectOptions};

/// The servers to try, in order, and what a server must be to be kept.
#[derive(Debug, Clone)]
pub struct Servers {
    pub candidates: Vec<Server>,
    /// `target_session_attrs=read-write`: a server in recovery or read-only is passed over.
    pub read_write: bool,
}

/// One host of the URL, with everything else the URL says.
#[derive(Debug, Clone)]
pub struct Server {
    /// `host:port`, for messages.
    pub name: String,
    /// The URL with this host only, for what takes a URL (creating the database, migrating).
    pub url: String,
    pub options: PgConnectOptions,
}

impl FromStr for Servers {
    type Err = anyhow::Error;

    fn from_str(url: &str) -> anyhow::Result<Self> {
        let invalid = || "DATABASE_URL is not a valid PostgreSQL connection string";
        let (scheme, rest) = url.split_once("://").with_context(invalid)?;
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (tail, read_write) = take_session_attrs(tail)?;
        let candidates = hosts
            .split(',')
            .map(|host| {
                let single = match userinfo {
                    Some(userinfo) => format!("{scheme}://{userinfo}@{host}{tail}"),
                    None => format!("{scheme}://{host}{tail}"),
                };
                let options = PgConnectOptions::from_str(&single).with_context(invalid)?;
                let name = format!("{}:{}", options.get_host(), options.get_port());
                Ok(Server {
                    name,
                    url: single,
                    options,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            candidates,
            read_write,
        })
    }
}

/// Takes `target_session_attrs` out of the URL's query (sqlx does not know it): whether it asks
/// for a writable server. libpq's other values (standby, prefer-standby, …) are refused rather
/// than silently ignored.
fn take_session_attrs(tail: &str) -> anyhow::Result<(String, bool)> {
    let Some((path, query)) = tail.split_once('?') else {
        return Ok((tail.to_owned(), false));
    };
    let mut read_write = false;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("target_session_attrs", value)) => match value {
                "read-write" | "primary" => read_write = true,
                "any" => read_write = false,
                other => bail!(
                    "DATABASE_URL: target_session_attrs={other} is not supported (use read-write or any)"
                ),
            },
            _ => kept.push(pair),
        }
    }
    let tail = if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    Ok((tail, read_write))
}

impl Servers {
    /// The URL of the server to write to: the only one, or the first that takes writes (asked
    /// on its `postgres` database, since the target database may not exist yet).
    pub async fn writable_url(&self) -> anyhow::Result<String> {
        if let [only] = self.candidates.as_slice() {
            return Ok(only.url.clone());
        }
        let mut refusals = Vec::new();
        for server in &self.candidates {
            let maintenance = Server {
                options: server.options.clone().database("postgres"),
                ..server.clone()
            };
            match open(&maintenance, self.read_write).await {
                Ok(connection) => {
                    let _ = connection.close().await;
                    return Ok(server.url.clone());
                }
                Err(e) => refusals.push(e.to_string()),
            }
        }
        bail!(
            "no server in DATABASE_URL takes writes ({})",
            refusals.join("; ")
        )
    }
}

/// Whether this connection's server takes writes: not a standby in recovery, and not read-only
/// by default. libpq's `read-write` asks the same.
pub async fn takes_writes(connection: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' AS "writable!""#
    )
    .fetch_one(connection)
    .await
}

/// Opens a connection to `server`; with `read_write`, closes it again and says why if the server
/// does not take writes.
pub async fn open(server: &Server, read_write: bool) -> Result<PgConnection, sqlx::Error> {
    let mut connection = PgConnection::connect_with(&server.options).await?;
    ask_the_server_to_notice_silence(&mut connection).await?;
    if read_write && !takes_writes(&mut connection).await? {
        let _ = connection.close().await;
        return Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!(
                "{} does not take writes (a standby, or read-only)",
                server.name
            ),
        )));
    }
    Ok(connection)
}

/// The server's end of the socket: a client whose network went silent is noticed within about ten
/// seconds (keepalive probes, and a limit on unacknowledged data), its session ended and what its
/// transaction held released. Our end is bounded by the request and worker deadlines; sqlx does
/// not let us set the socket's own options (`docs/design.md`, "The connection pool").
async fn ask_the_server_to_notice_silence(
    connection: &mut PgConnection,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"SELECT set_config('tcp_keepalives_idle', '5', false) AS "idle!",
                  set_config('tcp_keepalives_interval', '2', false) AS "interval!",
                  set_config('tcp_keepalives_count', '3', false) AS "count!""#
    )
    .fetch_one(&mut *connection)
    .await?;
    // Linux has TCP_USER_TIMEOUT; a server without it refuses the setting, and keeps keepalives.
    if let Err(e) = sqlx::query!("SELECT set_config('tcp_user_timeout', '10000', false)")
        .fetch_one(&mut *connection)
        .await
        && super::Failure::of(&e).is_transient()
    {
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(servers: &Servers) -> Vec<&str> {
        servers.candidates.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn one_host_is_one_server_that_need_not_take_writes() {
        let servers: Servers = "postgres://postgres@127.0.0.1:5432/payments"
            .parse()
            .unwrap();
        assert_eq!(hosts(&servers), ["127.0.0.1:5432"]);
        assert!(!servers.read_write);
        assert_eq!(
            servers.candidates[0].options.get_database(),
            Some("payments")
        );
    }

    #[test]
    fn several_hosts_keep_their_order_ports_and_everything_else() {
        let servers: Servers =
            "postgres://app:s3cret@db1:5433,db2,[::1]:6000/payments?sslmode=disable&target_session_attrs=read-write"
                .parse()
                .unwrap();
        assert_eq!(hosts(&servers), ["db1:5433", "db2:5432", "[::1]:6000"]);
        assert!(servers.read_write);
        for server in &servers.candidates {
            assert_eq!(server.options.get_username(), "app");
            assert_eq!(server.options.get_database(), Some("payments"));
        }
    }

    #[test]
    fn session_attrs_other_than_writable_or_any_are_refused() {
        let refused = "postgres://h1,h2/db?target_session_attrs=standby".parse::<Servers>();
        assert!(refused.unwrap_err().to_string().contains("standby"));
        let any: Servers = "postgres://h1,h2/db?target_session_attrs=any"
            .parse()
            .unwrap();
        assert!(!any.read_write);
    }

    #[test]
    fn garbage_is_refused() {
        assert!("not a url".parse::<Servers>().is_err());
        assert!("postgres://h1:notaport/db".parse::<Servers>().is_err());
    }
}
