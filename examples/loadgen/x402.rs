//! The x402 workload: payments-api as the facilitator of x402's own express resource server and
//! `@x402/fetch` clients, on an anvil with one-second blocks (`tests/x402/bench.mjs` drives the
//! Node side). Measures paid requests per second and settle latency against the block time, then
//! how many payments one block carries when a burst of them is settled at once; by EIP-3009, then
//! the same by Permit2.

use std::{path::Path, process::Command};

use anyhow::Context;
use payments_api::rails::evm::devnet::{self, ANVIL_KEYS};
use serde::{Deserialize, Serialize};

use super::{ApiProcess, empty_database, settlement::start_anvil};

/// The x402 workload's figures: by EIP-3009 (the devnet token), and the same workload by Permit2
/// (a token like Tether's) under `permit2`.
#[derive(Debug, Serialize, Deserialize)]
pub struct X402Report {
    #[serde(flatten)]
    pub eip3009: X402Run,
    #[serde(default)]
    pub permit2: Option<X402Run>,
    #[serde(default)]
    pub block_ms: u64,
}

/// One way to pay through the x402 workload.
#[derive(Debug, Serialize, Deserialize)]
pub struct X402Run {
    pub clients: u64,
    pub seconds: u64,
    pub paid_requests: u64,
    pub refused_requests: u64,
    pub settles_per_second: f64,
    /// Around the resource server's own facilitator client: the request to `/x402/settle` and
    /// its answer, which comes once the transfer is in a block.
    pub settle_p50_ms: Option<f64>,
    pub settle_p99_ms: Option<f64>,
    pub burst_payments: u64,
    pub burst_succeeded: u64,
    pub burst_blocks_used: u64,
    pub burst_max_payments_per_block: u64,
    pub burst_seconds: f64,
    /// What the burst's settles that did not succeed answered, by reason.
    #[serde(default)]
    pub burst_refusals: std::collections::BTreeMap<String, u64>,
}

pub async fn run(
    api_bin: &Path,
    server: &str,
    clients: usize,
    seconds: u64,
    burst: usize,
) -> anyhow::Result<X402Report> {
    let (_anvil, rpc_url) = start_anvil()?;
    devnet::set_up(&rpc_url.parse()?).await?;
    let database_url = empty_database(server, "payments_bench_x402").await?;
    let env = [
        ("CHAINS".to_owned(), format!("evm:31337={rpc_url}")),
        ("CHAIN_CONFIRMATIONS".to_owned(), "2".to_owned()),
        ("CHAIN_POLL_INTERVAL_MS".to_owned(), "100".to_owned()),
        ("RELAYER_PRIVATE_KEY".to_owned(), ANVIL_KEYS[3].to_owned()),
    ];
    let api = ApiProcess::start(api_bin, &database_url, &env).await?;
    eprintln!(
        "loadgen: x402, {clients} clients through @x402/express for {seconds} s, then a burst of {burst}"
    );
    let output = tokio::task::spawn_blocking({
        let base = format!("http://{}", api.addr);
        move || {
            Command::new("node")
                .arg("tests/x402/bench.mjs")
                .env("X402_API", base)
                .env("X402_RPC", rpc_url)
                .env("X402_CLIENTS", clients.to_string())
                .env("X402_SECONDS", seconds.to_string())
                .env("X402_BURST", burst.to_string())
                .output()
        }
    })
    .await?
    .context("run node tests/x402/bench.mjs (npm ci --prefix tests/x402)")?;
    anyhow::ensure!(
        output.status.success(),
        "tests/x402/bench.mjs failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut report: X402Report =
        serde_json::from_slice(&output.stdout).context("tests/x402/bench.mjs printed no report")?;
    report.block_ms = 1000;
    Ok(report)
}
