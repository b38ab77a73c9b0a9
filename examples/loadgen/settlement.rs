//! The settlement workload: `intents` intents confirmed at once on an anvil with one-second blocks,
//! relayed by one relayer key or several, settled after `CHAIN_CONFIRMATIONS`. Measures the time from each
//! intent's `processing` to its `succeeded` (both transitions' commit times) against the floor a
//! chain imposes, confirmations × block time, and how many payments each block carried.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use alloy::signers::{SignerSync, local::PrivateKeySigner};
use anyhow::{Context, bail};
use payments_api::rails::evm::devnet::{self, ANVIL_KEYS};
use serde::Serialize;
use sqlx::{Connection as _, PgConnection};

use super::{ApiProcess, BODY, TOKEN, empty_database};

pub const CONFIRMATIONS: u64 = 2;
const BLOCK_SECONDS: u64 = 1;
/// The relayer keys a run may use: anvil's fourth account, then its fifth.
const RELAYER_KEYS: [&str; 2] = [
    ANVIL_KEYS[3],
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
];

#[derive(Debug, Serialize)]
pub struct SettlementReport {
    pub intents: usize,
    pub relayer_keys: usize,
    pub confirmations: u64,
    pub block_seconds: u64,
    /// Confirmations × block time: no chain settles faster than this after inclusion.
    pub floor_ms: f64,
    pub confirm_to_succeeded_p50_ms: f64,
    pub confirm_to_succeeded_p99_ms: f64,
    pub confirm_to_succeeded_max_ms: f64,
    /// Blocks that carried the payments, and the most payments in one of them.
    pub blocks_used: usize,
    pub max_payments_per_block: i64,
    pub wall_seconds: f64,
}

pub struct Anvil(Child);

impl Drop for Anvil {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn anvil_bin() -> PathBuf {
    std::env::var_os("ANVIL_BIN").map_or_else(
        || PathBuf::from("contracts/node_modules/.bin/anvil"),
        PathBuf::from,
    )
}

/// Anvil with one-second blocks; returns it and its RPC URL.
pub fn start_anvil() -> anyhow::Result<(Anvil, String)> {
    start_anvil_with(&["--block-time", &BLOCK_SECONDS.to_string()])
}

/// Anvil with `args`, on chain 31337 unless they name another; returns it and its RPC URL.
pub fn start_anvil_with(args: &[&str]) -> anyhow::Result<(Anvil, String)> {
    let chain_id = if args.contains(&"--chain-id") {
        &[][..]
    } else {
        &["--chain-id", "31337"][..]
    };
    let mut child = Command::new(anvil_bin())
        .args(["--port", "0"])
        .args(chain_id)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("start anvil (make chain-tools)")?;
    let mut lines = BufReader::new(child.stdout.take().context("anvil's stdout")?).lines();
    let address = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("Listening on ").map(str::to_owned))
        .context("anvil did not say where it listens")?;
    std::thread::spawn(move || lines.for_each(drop));
    Ok((Anvil(child), format!("http://{address}")))
}

pub async fn run(
    api_bin: &Path,
    server: &str,
    intents: usize,
    relayer_keys: usize,
) -> anyhow::Result<SettlementReport> {
    anyhow::ensure!(
        (1..=RELAYER_KEYS.len()).contains(&relayer_keys),
        "--settlement-relayer-keys is 1 or {}",
        RELAYER_KEYS.len()
    );
    let (_anvil, rpc_url) = start_anvil()?;
    devnet::set_up(&rpc_url.parse()?).await?;
    let database_url = empty_database(server, "payments_bench_settlement").await?;
    let env = [
        ("CHAINS".to_owned(), format!("evm:31337={rpc_url}")),
        ("CHAIN_CONFIRMATIONS".to_owned(), CONFIRMATIONS.to_string()),
        ("CHAIN_POLL_INTERVAL_MS".to_owned(), "100".to_owned()),
        (
            "RELAYER_PRIVATE_KEY".to_owned(),
            RELAYER_KEYS[..relayer_keys].join(","),
        ),
    ];
    let api = ApiProcess::start(api_bin, &database_url, &env).await?;
    let base = format!("http://{}", api.addr);
    let client = reqwest::Client::new();
    let payer: PrivateKeySigner = ANVIL_KEYS[1].parse()?;

    let mut signed = Vec::with_capacity(intents);
    for _ in 0..intents {
        let created: serde_json::Value = client
            .post(format!("{base}/v1/payment_intents"))
            .bearer_auth(TOKEN)
            .body(BODY)
            .send()
            .await?
            .json()
            .await?;
        let id = created["id"].as_str().context("an intent id")?.to_owned();
        let authorization: serde_json::Value = client
            .get(format!("{base}/v1/payment_intents/{id}/authorization"))
            .bearer_auth(TOKEN)
            .send()
            .await?
            .json()
            .await?;
        let digest: alloy::primitives::B256 = authorization["digest"]
            .as_str()
            .context("a digest")?
            .parse()?;
        let signature = payer.sign_hash_sync(&digest)?;
        signed.push((id, format!("0x{}", hex::encode(signature.as_bytes()))));
    }

    eprintln!("loadgen: confirming {intents} intents at once");
    let started = Instant::now();
    let confirms = signed.iter().map(|(id, signature)| {
        let request = client
            .post(format!("{base}/v1/payment_intents/{id}/confirm"))
            .bearer_auth(TOKEN)
            .header("idempotency-key", format!("bench-{id}"))
            .body(serde_json::json!({ "signature": signature }).to_string());
        async move { request.send().await.map(|r| r.status().as_u16()) }
    });
    for status in futures::future::join_all(confirms).await {
        anyhow::ensure!(status? == 200, "a confirm failed");
    }
    let mut db = PgConnection::connect(&database_url).await?;
    loop {
        let open: i64 =
            sqlx::query_scalar("SELECT count(*) FROM payment_intents WHERE state <> 'succeeded'")
                .fetch_one(&mut db)
                .await?;
        if open == 0 {
            break;
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("{open} intents did not settle within five minutes");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wall_seconds = started.elapsed().as_secs_f64();
    let mut latencies: Vec<f64> = sqlx::query_scalar(
        "SELECT (extract(epoch FROM s.occurred_at - p.occurred_at) * 1000)::float8
           FROM payment_intent_transitions p
           JOIN payment_intent_transitions s USING (merchant_id, intent_id)
          WHERE p.to_state = 'processing' AND s.to_state = 'succeeded'",
    )
    .fetch_all(&mut db)
    .await?;
    latencies.sort_by(f64::total_cmp);
    let per_block: Vec<i64> = sqlx::query_scalar(
        "SELECT count(*) FROM payment_intents GROUP BY settlement->>'block_number'",
    )
    .fetch_all(&mut db)
    .await?;
    let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    Ok(SettlementReport {
        intents,
        relayer_keys,
        confirmations: CONFIRMATIONS,
        block_seconds: BLOCK_SECONDS,
        floor_ms: (CONFIRMATIONS * BLOCK_SECONDS * 1000) as f64,
        confirm_to_succeeded_p50_ms: at(0.5),
        confirm_to_succeeded_p99_ms: at(0.99),
        confirm_to_succeeded_max_ms: at(1.0),
        blocks_used: per_block.len(),
        max_payments_per_block: per_block.iter().copied().max().unwrap_or(0),
        wall_seconds,
    })
}
