//! A real PostgreSQL (testcontainers by default, `TEST_DATABASE_URL` to use an existing server) and
//! a fresh database per test, cloned from a template migrated once per test process.

use std::{sync::OnceLock, time::Duration};

use payments_api::db;
use sqlx::{Connection, PgConnection};
use testcontainers_modules::{
    postgres::Postgres,
    testcontainers::{ImageExt, core::Mount, runners::AsyncRunner},
};
use tokio::sync::OnceCell;

/// The id of the shared container, removed when the test process exits (statics are never
/// dropped, so testcontainers' own cleanup would not run).
static CONTAINER_ID: OnceLock<String> = OnceLock::new();
static SERVER_URL: OnceCell<String> = OnceCell::const_new();

/// The server named by `TEST_DATABASE_URL`, when the tests use one: its databases of this process
/// are dropped when the process exits.
static SHARED_SERVER: OnceLock<String> = OnceLock::new();

#[dtor::dtor]
unsafe fn clean_up_at_exit() {
    if let Some(id) = CONTAINER_ID.get() {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", "-v", id])
            .output();
    }
    if let Some(server) = SHARED_SERVER.get() {
        // The tests' runtimes are gone by now; a small one of its own does the dropping.
        if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            let pid = std::process::id().to_string();
            let drop_ours = drop_databases(server, move |owner| owner == pid);
            runtime.block_on(async {
                let _ = tokio::time::timeout(Duration::from_secs(10), drop_ours).await;
            });
        }
    }
}

/// The URL of a PostgreSQL server's `postgres` database, started once per test process.
async fn server_url() -> &'static str {
    SERVER_URL
        .get_or_init(|| async {
            if let Ok(url) = std::env::var("TEST_DATABASE_URL") {
                // What earlier runs that did not exit cleanly left behind.
                drop_databases(&url, |owner| {
                    !std::path::Path::new(&format!("/proc/{owner}")).exists()
                })
                .await;
                let _ = SHARED_SERVER.set(url.clone());
                return url;
            }
            let image = std::env::var("TEST_POSTGRES_IMAGE")
                .unwrap_or_else(|_| "postgres:16-alpine".to_owned());
            let (name, tag) = image.rsplit_once(':').unwrap_or((&image, "latest"));
            let container = Postgres::default()
                .with_name(name)
                .with_tag(tag)
                .with_cmd(["postgres", "-c", "max_connections=300", "-c", "fsync=off"])
                // In memory: a test's database is never dropped before the process exits, and
                // hundreds of them must not fill a small disk (nor wait on it).
                .with_mount(Mount::tmpfs_mount("/var/lib/postgresql/data"))
                .start()
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot start {image} with testcontainers ({e}): set TEST_POSTGRES_IMAGE to \
                         an image this machine has, or TEST_DATABASE_URL=postgres://…/postgres to \
                         use a running server"
                    )
                });
            CONTAINER_ID
                .set(container.id().to_owned())
                .expect("one container per process");
            let port = container
                .get_host_port_ipv4(5432)
                .await
                .expect("mapped port");
            // Never dropped: removed by `remove_test_container` when the process exits.
            std::mem::forget(container);
            format!("postgres://postgres:postgres@127.0.0.1:{port}/postgres")
        })
        .await
}

/// Databases are named after the test process that made them, so they can be dropped by owner.
const DB_PREFIX: &str = "payments_test_";

/// Drops the test databases on `server` whose owning process id `doomed` accepts.
async fn drop_databases(server: &str, doomed: impl Fn(&str) -> bool) {
    let Ok(mut conn) = PgConnection::connect(server).await else {
        return;
    };
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database WHERE datname LIKE 'payments\\_test\\_%'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap_or_default();
    for name in names {
        let owner = name
            .trim_start_matches(DB_PREFIX)
            .split('_')
            .next()
            .unwrap_or("");
        if !owner.is_empty() && doomed(owner) {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                .execute(&mut conn)
                .await;
        }
    }
}

static TEMPLATE: OnceCell<String> = OnceCell::const_new();

/// The name of a database migrated once for this test process, which every test's database copies.
async fn template() -> &'static str {
    TEMPLATE
        .get_or_init(|| async {
            let url = empty_database().await;
            db::migrate(&url)
                .await
                .expect("migrate the template database");
            url.rsplit_once('/')
                .expect("URL has a database")
                .1
                .to_owned()
        })
        .await
}

/// A new, migrated database; returns its URL.
pub async fn fresh_database() -> String {
    create_database(Some(template().await)).await
}

/// A new database without any table; returns its URL.
pub async fn empty_database() -> String {
    create_database(None).await
}

/// The URL of a database that does not exist (named like the others, so that it is dropped with
/// them if a test creates it).
pub async fn missing_database() -> String {
    let (base, _) = server_url()
        .await
        .rsplit_once('/')
        .expect("URL has a database");
    format!("{base}/{}", database_name())
}

fn database_name() -> String {
    format!(
        "{DB_PREFIX}{}_{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    )
}

async fn create_database(template: Option<&str>) -> String {
    let server = server_url().await;
    let name = database_name();
    let statement = match template {
        Some(template) => format!("CREATE DATABASE \"{name}\" TEMPLATE \"{template}\""),
        None => format!("CREATE DATABASE \"{name}\""),
    };
    let mut conn = PgConnection::connect(server)
        .await
        .expect("connect to the test server");
    // Copying a template fails while anyone else is connected to it: the migration's own
    // connection may take a moment to end on the server after it closed.
    let mut backoff = Duration::from_millis(5);
    loop {
        match sqlx::query(&statement).execute(&mut conn).await {
            Ok(_) => break,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55006") => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
            Err(e) => panic!("create database: {e}"),
        }
    }
    let (base, _) = server.rsplit_once('/').expect("URL has a database");
    format!("{base}/{name}")
}
