//! Test harness: a real PostgreSQL (testcontainers by default, `TEST_DATABASE_URL` to use an
//! existing server), a fresh database per test, and the app served on a random port.

use std::{
    net::TcpListener,
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use payments_api::{
    config::{IdempotencySettings, Settings},
    db,
    startup::Application,
    sweeper::{self, SweepReport},
};
use reqwest::{Client, Response};
use sqlx::{Connection, PgConnection, PgPool, postgres::PgPoolOptions};
use testcontainers_modules::{
    postgres::Postgres,
    testcontainers::{ImageExt, runners::AsyncRunner},
};
use tokio::sync::OnceCell;

pub const DEMO_TOKEN: &str = "merchant-demo";
pub const DEMO_MERCHANT: &str = "merchant_demo";
pub const OTHER_TOKEN: &str = "merchant-other";
pub const OTHER_MERCHANT: &str = "merchant_other";

/// The seed request of SPEC §1.
pub const SEED_BODY: &str = r#"{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","amount":"100000000","expires_in_seconds":900}"#;

/// The seed body with another amount.
pub fn body_with_amount(amount: &str) -> String {
    SEED_BODY.replace(
        r#""amount":"100000000""#,
        &format!(r#""amount":"{amount}""#),
    )
}

/// The id of the shared container, removed when the test process exits (statics are never
/// dropped, so testcontainers' own cleanup would not run).
static CONTAINER_ID: OnceLock<String> = OnceLock::new();
static SERVER_URL: OnceCell<String> = OnceCell::const_new();

#[dtor::dtor]
unsafe fn remove_test_container() {
    if let Some(id) = CONTAINER_ID.get() {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", "-v", id])
            .output();
    }
}

/// The URL of a PostgreSQL server's `postgres` database, started once per test process.
async fn server_url() -> &'static str {
    SERVER_URL
        .get_or_init(|| async {
            if let Ok(url) = std::env::var("TEST_DATABASE_URL") {
                drop_stale_databases(&url).await;
                return url;
            }
            let image = std::env::var("TEST_POSTGRES_IMAGE")
                .unwrap_or_else(|_| "postgres:16-alpine".to_owned());
            let (name, tag) = image.rsplit_once(':').unwrap_or((&image, "latest"));
            let container = Postgres::default()
                .with_name(name)
                .with_tag(tag)
                .with_cmd(["postgres", "-c", "max_connections=300", "-c", "fsync=off"])
                .start()
                .await
                .expect("start PostgreSQL with testcontainers (or set TEST_DATABASE_URL)");
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

/// Databases are named after the test process, so a later run can drop what an earlier one left.
const DB_PREFIX: &str = "payments_test_";

async fn drop_stale_databases(server: &str) {
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
        let pid = name
            .trim_start_matches(DB_PREFIX)
            .split('_')
            .next()
            .unwrap_or("");
        if !pid.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                .execute(&mut conn)
                .await;
        }
    }
}

/// A new, migrated database; returns its URL.
pub async fn fresh_database() -> String {
    let url = empty_database().await;
    db::migrate(&url).await.expect("migrate the test database");
    url
}

/// A new database without any table; returns its URL.
pub async fn empty_database() -> String {
    let server = server_url().await;
    let name = format!(
        "{DB_PREFIX}{}_{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    );
    let mut conn = PgConnection::connect(server)
        .await
        .expect("connect to the test server");
    sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(&mut conn)
        .await
        .expect("create database");
    let (base, _) = server.rsplit_once('/').expect("URL has a database");
    format!("{base}/{name}")
}

pub fn test_settings(database_url: &str) -> Settings {
    Settings {
        database_url: database_url.to_owned(),
        db_max_connections: 10,
        bind_addr: "127.0.0.1:0".parse().unwrap(),
        idempotency: IdempotencySettings {
            lease: Duration::from_secs(30),
            retention: Duration::from_secs(86_400),
            key_required: false,
        },
        request_timeout: Duration::from_secs(25),
        max_body_bytes: 65_536,
        sweep_interval: Duration::from_secs(10),
        bootstrap_api_keys: vec![
            (DEMO_TOKEN.to_owned(), DEMO_MERCHANT.to_owned()),
            (OTHER_TOKEN.to_owned(), OTHER_MERCHANT.to_owned()),
        ],
    }
}

/// Builds the app and serves it in the background; returns its base URL.
pub async fn serve(settings: Settings) -> String {
    // Quiet by default; TEST_LOG=1 shows the server's log lines.
    if std::env::var_os("TEST_LOG").is_some() {
        // Kept for the whole test process: the first app to start installs the subscriber.
        std::mem::forget(payments_api::telemetry::init(
            payments_api::config::LogFormat::Pretty,
        ));
    }
    let app = Application::build(&settings).await.expect("build the app");
    let address = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until_stopped());
    address
}

pub struct TestApp {
    pub address: String,
    pub database_url: String,
    /// A pool of the test's own, to inspect and manipulate the database directly.
    pub db: PgPool,
    pub client: Client,
}

impl TestApp {
    pub async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    /// Spawns the app with settings adjusted by `configure`, on its own fresh database.
    pub async fn spawn_with(configure: impl FnOnce(&mut Settings)) -> Self {
        let database_url = fresh_database().await;
        Self::spawn_on(&database_url, configure).await
    }

    /// Spawns another app on an existing database (a second replica, or a restart).
    pub async fn spawn_on(database_url: &str, configure: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = test_settings(database_url);
        configure(&mut settings);
        let address = serve(settings).await;
        let db = PgPoolOptions::new()
            .max_connections(5)
            .connect(database_url)
            .await
            .expect("test pool");
        Self {
            address,
            database_url: database_url.to_owned(),
            db,
            client: Client::new(),
        }
    }

    /// One round of the sweepers, as a replica runs it, on a connection of the test's own.
    pub async fn sweep(&self) -> Result<SweepReport, sqlx::Error> {
        let mut connection = self.db.acquire().await.expect("test connection");
        sweeper::sweep_once(&mut connection).await
    }

    /// POST /v1/payment_intents as curl's `-d` sends it (form Content-Type), like SPEC §1.
    pub async fn create_intent(&self, token: &str, key: Option<&str>, body: &str) -> Response {
        let mut request = self
            .client
            .post(format!("{}/v1/payment_intents", self.address))
            .bearer_auth(token)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_owned());
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        request.send().await.expect("request sent")
    }

    /// POST /v1/payment_intents/{id}/cancel, with an Idempotency-Key if given.
    pub async fn cancel(&self, token: &str, id: &str, key: Option<&str>) -> Answer {
        let mut request = self
            .client
            .post(format!("{}/v1/payment_intents/{id}/cancel", self.address))
            .bearer_auth(token);
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        Answer::of(request.send().await.unwrap()).await
    }

    /// GET /v1/payment_intents?{query}.
    pub async fn list(&self, token: &str, query: &str) -> Answer {
        let url = format!("{}/v1/payment_intents?{query}", self.address);
        Answer::of(
            self.client
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// An unauthenticated GET (health, metrics, the OpenAPI document, unknown routes).
    pub async fn get(&self, path: &str) -> Answer {
        Answer::of(
            self.client
                .get(format!("{}{path}", self.address))
                .send()
                .await
                .expect("request sent"),
        )
        .await
    }

    pub async fn get_intent(&self, token: &str, id: &str) -> Response {
        self.client
            .get(format!("{}/v1/payment_intents/{id}", self.address))
            .bearer_auth(token)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn intent_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM payment_intents")
            .fetch_one(&self.db)
            .await
            .unwrap()
    }

    pub async fn key_record(&self, scope: &str, key: &str) -> Option<KeyRecord> {
        sqlx::query_as(
            "SELECT state, attempt, response_status FROM idempotency_keys WHERE scope = $1 AND key = $2",
        )
        .bind(scope)
        .bind(key)
        .fetch_optional(&self.db)
        .await
        .unwrap()
    }

    /// Polls the database until `condition` (a boolean SQL expression) holds: awaiting a state,
    /// not sleeping for a guessed time. Panics after 30 s.
    pub async fn wait_until(&self, what: &str, condition_sql: &str) {
        let query = format!("SELECT ({condition_sql}) IS TRUE");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let holds: bool = sqlx::query_scalar(&query)
                .fetch_one(&self.db)
                .await
                .unwrap();
            if holds {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting until {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[derive(Debug, sqlx::FromRow)]
pub struct KeyRecord {
    pub state: String,
    pub attempt: i32,
    pub response_status: Option<i16>,
}

/// SHA-256 of `METHOD \n PATH \n BODY`, computed independently of the server (SPEC §5.2).
pub fn fingerprint(method: &str, path: &str, body: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(format!("{method}\n{path}\n{body}").as_bytes()).into()
}

pub fn short_fingerprint(method: &str, path: &str, body: &str) -> String {
    hex::encode(&fingerprint(method, path, body)[..8])
}

/// Status, the headers that matter, and the raw body of a response.
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Answer {
    pub async fn of(response: Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.text().await.expect("body");
        Self {
            status,
            headers,
            body,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("JSON body")
    }
}

/// The real binary in its own process, so it can be SIGKILLed.
pub struct ServerProcess {
    pub child: Child,
    pub address: String,
    /// Where the child's stdout and stderr go.
    pub log: std::path::PathBuf,
}

impl ServerProcess {
    /// Starts `payments-api serve` on a free port with the demo key and extra environment.
    pub async fn start(database_url: &str, env: &[(&str, &str)]) -> Self {
        // Ask the OS for a free port, then hand it to the child.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log_path = std::env::temp_dir().join(format!("payments-api-test-{port}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_payments-api"))
            .arg("serve")
            .env("DATABASE_URL", database_url)
            .env("BIND_ADDR", format!("127.0.0.1:{port}"))
            .env("BOOTSTRAP_API_KEYS", "merchant-demo=merchant_demo")
            .envs(env.iter().copied())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start payments-api");
        let address = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while client
            .get(format!("{address}/healthz"))
            .send()
            .await
            .is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "payments-api did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self {
            child,
            address,
            log: log_path,
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // A failed test must not leave a server running.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

impl ServerProcess {
    /// Everything the server has logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Holds `LOCK TABLE payment_intents IN SHARE MODE` on a connection of its own until released:
/// every intent insert stalls behind it, inside its request's transaction, with no hook in the
/// production code.
pub struct IntentInsertBlocker(PgConnection);

impl TestApp {
    pub async fn block_intent_inserts(&self) -> IntentInsertBlocker {
        let mut conn = PgConnection::connect(&self.database_url).await.unwrap();
        sqlx::raw_sql("BEGIN; LOCK TABLE payment_intents IN SHARE MODE")
            .execute(&mut conn)
            .await
            .unwrap();
        IntentInsertBlocker(conn)
    }
}

impl IntentInsertBlocker {
    pub async fn release(mut self) {
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut self.0)
            .await
            .unwrap();
    }
}

/// POSTs the seed body under `key` to `address` in the background (a request that will stall).
pub fn spawn_create(address: &str, key: &str) -> tokio::task::JoinHandle<reqwest::Result<Answer>> {
    let (url, key) = (format!("{address}/v1/payment_intents"), key.to_owned());
    tokio::spawn(async move {
        let response = Client::new()
            .post(url)
            .bearer_auth(DEMO_TOKEN)
            .header("idempotency-key", key)
            .body(SEED_BODY)
            .send()
            .await?;
        Ok(Answer::of(response).await)
    })
}
