//! The app served in this test process on a random port, and what tests ask of it.

use std::time::Duration;

use payments_api::{
    config::{IdempotencySettings, MerchantLimits, Settings, SettlementSettings, WebhookSettings},
    housekeeping::{SweepReport, Sweeper},
    startup::Application,
};
use reqwest::{Client, RequestBuilder};
use sqlx::{PgPool, postgres::PgPoolOptions};

use super::{
    DEMO_MERCHANT, DEMO_TOKEN, OTHER_MERCHANT, OTHER_TOKEN, SEED_BODY, fresh_database,
    proxy::FaultProxy,
};

pub fn test_settings(database_url: &str) -> Settings {
    Settings {
        database_url: database_url.to_owned(),
        db_max_connections: 10,
        db_background_connections: 4,
        // Every connection but one: tests race many requests and hold some at a lock, and the
        // default (twice the cores) would make them wait for turns on a small machine.
        db_request_turns: Some(9),
        // Generous: tests race many requests on a small pool on a busy machine; the shedding
        // test sets its own.
        db_wait_timeout: Duration::from_secs(5),
        // Off unless a test is about them: tests race many requests of one merchant.
        merchant_limits: MerchantLimits::unlimited(),
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
        public_base_url: "http://localhost:8080".to_owned(),
        // Receivers in tests listen on 127.0.0.1 over plain HTTP, and retry fast.
        webhooks: WebhookSettings {
            timeout: Duration::from_secs(2),
            retry_base: Duration::from_millis(200),
            retry_for: WebhookSettings::RETRY_FOR,
            disable_after: WebhookSettings::DISABLE_AFTER,
            allow_http: true,
            allow_private_networks: true,
            deliver: true,
        },
        settlement: SettlementSettings::off(),
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
    /// The chains whose intents this app's listener expires (its sweeper leaves them alone).
    pub settled_chains: Vec<String>,
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
        Self::spawn_reaching(database_url, database_url, configure).await
    }

    /// Spawns the app on a fresh database that it reaches through a [`FaultProxy`]; the test's own
    /// pool reaches the database directly.
    pub async fn spawn_behind_proxy(configure: impl FnOnce(&mut Settings)) -> (Self, FaultProxy) {
        let database_url = fresh_database().await;
        let mut url = reqwest::Url::parse(&database_url).expect("a database URL");
        let upstream = tokio::net::lookup_host((
            url.host_str().expect("a host").to_owned(),
            url.port().unwrap_or(5432),
        ))
        .await
        .unwrap()
        .next()
        .expect("the database host resolves");
        let proxy = FaultProxy::start(upstream).await;
        url.set_host(Some("127.0.0.1")).unwrap();
        url.set_port(Some(proxy.address.port())).unwrap();
        // The proxy reads the protocol in the clear.
        url.query_pairs_mut().append_pair("sslmode", "disable");
        let app = Self::spawn_reaching(url.as_str(), &database_url, configure).await;
        (app, proxy)
    }

    /// Spawns the app reaching its database at `app_url`, which may lead elsewhere than
    /// `database_url`, the database itself (a proxy, or a list of servers).
    pub async fn spawn_reaching(
        app_url: &str,
        database_url: &str,
        configure: impl FnOnce(&mut Settings),
    ) -> Self {
        let mut settings = test_settings(app_url);
        configure(&mut settings);
        let settled_chains = settings.settlement.chain_names();
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
            settled_chains,
        }
    }

    /// The same test view (database, client) talking to another server, e.g. a child process.
    pub fn pointed_at(&self, address: &str) -> Self {
        Self {
            address: address.to_owned(),
            database_url: self.database_url.clone(),
            db: self.db.clone(),
            client: self.client.clone(),
            settled_chains: self.settled_chains.clone(),
        }
    }

    /// One round of the sweepers, as a replica runs it, on a connection of the test's own.
    pub async fn sweep(&self) -> Result<SweepReport, sqlx::Error> {
        let mut connection = self.db.acquire().await.expect("test connection");
        Sweeper::new(self.settled_chains.clone(), Duration::from_secs(30))
            .sweep_once(&mut connection)
            .await
    }

    /// POST /v1/payment_intents as curl's `-d` sends it (form Content-Type), like the README's
    /// transcript.
    pub async fn create_intent(&self, token: &str, key: Option<&str>, body: &str) -> Answer {
        let request = self
            .client
            .post(format!("{}/v1/payment_intents", self.address))
            .bearer_auth(token)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_owned());
        Answer::send(with_key(request, key)).await
    }

    /// POST /v1/payment_intents/{id}/cancel, with an Idempotency-Key if given.
    pub async fn cancel(&self, token: &str, id: &str, key: Option<&str>) -> Answer {
        let request = self
            .client
            .post(format!("{}/v1/payment_intents/{id}/cancel", self.address))
            .bearer_auth(token);
        Answer::send(with_key(request, key)).await
    }

    /// GET /v1/payment_intents?{query}.
    pub async fn list(&self, token: &str, query: &str) -> Answer {
        self.get_as(token, &format!("/v1/payment_intents?{query}"))
            .await
    }

    /// GET /v1/payment_intents/{id}.
    pub async fn get_intent(&self, token: &str, id: &str) -> Answer {
        self.get_as(token, &format!("/v1/payment_intents/{id}"))
            .await
    }

    /// An unauthenticated GET (health, metrics, the OpenAPI document, unknown routes).
    pub async fn get(&self, path: &str) -> Answer {
        Answer::send(self.client.get(format!("{}{path}", self.address))).await
    }

    pub async fn event_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM events")
            .fetch_one(&self.db)
            .await
            .unwrap()
    }

    /// POST `body` (JSON) to `path` as the merchant of `token`, with an Idempotency-Key if given.
    pub async fn post_as(&self, token: &str, path: &str, key: Option<&str>, body: &str) -> Answer {
        let url = format!("{}{path}", self.address);
        let request = self
            .client
            .post(url)
            .bearer_auth(token)
            .body(body.to_owned());
        Answer::send(with_key(request, key)).await
    }

    /// DELETE `path` as the merchant of `token`.
    pub async fn delete_as(&self, token: &str, path: &str) -> Answer {
        let url = format!("{}{path}", self.address);
        Answer::send(self.client.delete(url).bearer_auth(token)).await
    }

    /// GET `path` (with its query) as the merchant of `token`.
    pub async fn get_as(&self, token: &str, path: &str) -> Answer {
        let url = format!("{}{path}", self.address);
        Answer::send(self.client.get(url).bearer_auth(token)).await
    }

    /// How many payments of intent `id` the ledger booked.
    pub async fn payments_booked(&self, id: &str) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM ledger_entries WHERE intent_id = $1 AND kind = 'payment'",
        )
        .bind(id)
        .fetch_one(&self.db)
        .await
        .unwrap()
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

    /// Runs the `payments-api` binary with `args` against this app's database: whether it
    /// succeeded, and what it printed.
    pub fn command(&self, args: &[&str]) -> (bool, String) {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_payments-api"))
            .args(args)
            .env("DATABASE_URL", &self.database_url)
            .output()
            .expect("run payments-api");
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        (output.status.success(), text.trim().to_owned())
    }

    /// Polls the database until `condition` (a boolean SQL expression) holds: awaiting a state,
    /// not sleeping for a guessed time. Panics after 30 s.
    pub async fn wait_until(&self, what: &str, condition_sql: &str) {
        self.wait_doing(what, condition_sql, || {
            tokio::time::sleep(Duration::from_millis(20))
        })
        .await
    }

    /// [`TestApp::wait_until`], doing `between` between two looks (mining a block, say).
    pub async fn wait_doing<F: std::future::Future<Output = ()>>(
        &self,
        what: &str,
        condition_sql: &str,
        mut between: impl FnMut() -> F,
    ) {
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
            between().await;
        }
    }
}

fn with_key(request: RequestBuilder, key: Option<&str>) -> RequestBuilder {
    match key {
        Some(key) => request.header("idempotency-key", key),
        None => request,
    }
}

#[derive(Debug, sqlx::FromRow)]
pub struct KeyRecord {
    pub state: String,
    pub attempt: i32,
    pub response_status: Option<i16>,
}

/// Status, the headers that matter, and the raw body of a response.
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Answer {
    /// Sends `request` and reads its whole answer.
    pub async fn send(request: RequestBuilder) -> Self {
        Self::of(request.send().await.expect("request sent")).await
    }

    pub async fn of(response: reqwest::Response) -> Self {
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

/// POSTs the seed body under `key` to `address` in the background (a request that will stall).
pub fn spawn_create(address: &str, key: &str) -> tokio::task::JoinHandle<reqwest::Result<Answer>> {
    spawn_create_as(address, DEMO_TOKEN, key)
}

/// [`spawn_create`] as the merchant of `token`.
pub fn spawn_create_as(
    address: &str,
    token: &str,
    key: &str,
) -> tokio::task::JoinHandle<reqwest::Result<Answer>> {
    let (url, token, key) = (
        format!("{address}/v1/payment_intents"),
        token.to_owned(),
        key.to_owned(),
    );
    tokio::spawn(async move {
        let response = Client::new()
            .post(url)
            .bearer_auth(token)
            .header("idempotency-key", key)
            .body(SEED_BODY)
            .send()
            .await?;
        Ok(Answer::of(response).await)
    })
}
