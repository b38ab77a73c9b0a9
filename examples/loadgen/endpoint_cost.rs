//! What a registered webhook endpoint costs a fresh create (`docs/bench/history.md`, "What an
//! endpoint costs a create"): rounds of creates without an endpoint, then with one, on the same
//! database and API process, so that neither side runs on emptier tables or a cooler cache. The
//! ratio of each round's pair is kept; the report gives their median and range. Measured twice:
//! with a replica that also delivers every event, and with one that leaves delivery to others.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use serde::Serialize;
use sqlx::{Connection as _, PgConnection};

use crate::{ApiProcess, Op, run};

const ENDPOINT_ID: &str = "we_00000000000000000000c057";
/// Rounds per kind of replica.
const ROUNDS: usize = 3;

/// Fresh creates with an endpoint registered over the same without, paired round by round.
#[derive(Debug, Serialize)]
pub struct EndpointCostReport {
    /// The replica that takes the creates also delivers every event.
    pub same_replica_delivers: EndpointCost,
    /// The replica writes the events and deliveries and leaves sending them to other replicas
    /// (`WEBHOOK_DELIVERY=false`): what the outbox costs a create.
    pub delivery_elsewhere: EndpointCost,
}

#[derive(Debug, Serialize)]
pub struct EndpointCost {
    /// Fresh creates per second without an endpoint, then with one, per round.
    pub rounds: Vec<(f64, f64)>,
    /// The median of the rounds' ratios (with / without).
    pub median_ratio: f64,
    pub min_ratio: f64,
    pub max_ratio: f64,
}

/// Where the rounds run: a database the API was already migrated on, and a receiver.
pub struct Database<'a> {
    pub api_bin: &'a Path,
    pub url: &'a str,
    pub api_env: &'a [(String, String)],
    pub receiver_url: &'a str,
}

/// Both measurements, one API process each (no other one may run on the database meanwhile).
pub async fn measure(
    on: &Database<'_>,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<EndpointCostReport> {
    let same_replica_delivers = rounds(on, true, clients, duration).await?;
    let delivery_elsewhere = rounds(on, false, clients, duration).await?;
    Ok(EndpointCostReport {
        same_replica_delivers,
        delivery_elsewhere,
    })
}

/// Runs the rounds against a replica that delivers or not. One that delivers has every delivery
/// a round caused done before the next side runs, so it weighs on its own round only.
async fn rounds(
    on: &Database<'_>,
    delivers: bool,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<EndpointCost> {
    let mut env = on.api_env.to_vec();
    env.push(("WEBHOOK_DELIVERY".to_owned(), delivers.to_string()));
    let server = ApiProcess::start(on.api_bin, on.url, &env).await?;
    let mut db = PgConnection::connect(on.url).await?;
    let mut pairs = Vec::with_capacity(ROUNDS);
    for round in 1..=ROUNDS {
        let mut rates = [0.0; 2];
        for (rate, with_endpoint) in rates.iter_mut().zip([false, true]) {
            register_endpoint(&mut db, with_endpoint.then_some(on.receiver_url)).await?;
            let side = if with_endpoint { "with" } else { "without" };
            let name = format!("create_fresh, round {round} {side} an endpoint");
            *rate = run(&server, &name, clients, duration, Op::CreateFresh)
                .await
                .rps;
            if delivers {
                wait_until_delivered(&mut db).await?;
            }
        }
        pairs.push((rates[0], rates[1]));
    }
    register_endpoint(&mut db, None).await?;
    let mut ratios: Vec<f64> = pairs
        .iter()
        .map(|(without, with)| if *without > 0.0 { with / without } else { 0.0 })
        .collect();
    ratios.sort_by(f64::total_cmp);
    Ok(EndpointCost {
        median_ratio: ratios[ratios.len() / 2],
        min_ratio: ratios[0],
        max_ratio: ratios[ratios.len() - 1],
        rounds: pairs,
    })
}

/// Registers the measurement's endpoint at `url`, or removes it.
async fn register_endpoint(db: &mut PgConnection, url: Option<&str>) -> anyhow::Result<()> {
    sqlx::query("DELETE FROM webhook_endpoints WHERE id = $1")
        .bind(ENDPOINT_ID)
        .execute(&mut *db)
        .await?;
    if let Some(url) = url {
        sqlx::query(
            "INSERT INTO webhook_endpoints (merchant_id, id, url, secret) \
             VALUES ('merchant_demo', $1, $2, 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=')",
        )
        .bind(ENDPOINT_ID)
        .bind(url)
        .execute(&mut *db)
        .await?;
    }
    Ok(())
}

/// Waits until no delivery is pending.
pub async fn wait_until_delivered(db: &mut PgConnection) -> anyhow::Result<()> {
    eprintln!("loadgen: waiting for every webhook to be delivered");
    let started = Instant::now();
    loop {
        let pending: i64 =
            sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'")
                .fetch_one(&mut *db)
                .await?;
        if pending == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(300),
            "{pending} webhooks still undelivered after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
