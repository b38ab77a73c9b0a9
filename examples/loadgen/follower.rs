//! The follower catching up (`docs/operations.md`): a follower at the head of its chain, then
//! 10 000 blocks mined at once, read through the JSON-RPC fault proxy as a provider serves them:
//! with no cap on `eth_getLogs` ranges, with a cap of 500 blocks (the follower's own widest) and
//! with a cap of 100 (refused in the providers' words until the range fits). Blocks per second
//! from the moment the blocks show (the proxy hides them while anvil mines) to the cursor at the
//! new head.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use alloy::{
    primitives::U64,
    providers::{Provider, ProviderBuilder},
};
use anyhow::Context;
use payments_api::rails::evm::devnet;
use serde::Serialize;
use sqlx::{Connection as _, PgConnection};

use super::{
    ApiProcess, BODY, TOKEN, empty_database, rpc_fault::RpcFaultProxy, settlement::start_anvil_with,
};

const BLOCKS: u64 = 10_000;

#[derive(Debug, Serialize)]
pub struct CatchUpRun {
    /// The provider's widest `eth_getLogs` range, in blocks; `None` for no cap.
    pub range_cap: Option<u64>,
    pub blocks: u64,
    pub seconds: f64,
    pub blocks_per_second: f64,
    pub range_refusals: u64,
    pub logs_calls: u64,
}

#[derive(Debug, Serialize)]
pub struct CatchUpReport {
    pub runs: Vec<CatchUpRun>,
}

pub async fn run(api_bin: &Path, server: &str) -> anyhow::Result<CatchUpReport> {
    let mut runs = Vec::new();
    for cap in [None, Some(500), Some(100)] {
        runs.push(catch_up(api_bin, server, cap).await?);
    }
    Ok(CatchUpReport { runs })
}

async fn catch_up(
    api_bin: &Path,
    server: &str,
    range_cap: Option<u64>,
) -> anyhow::Result<CatchUpRun> {
    let (_anvil, rpc_url) = start_anvil_with(&[])?;
    devnet::set_up(&rpc_url.parse()?).await?;
    let proxy = RpcFaultProxy::start(&rpc_url).await;
    proxy.cap_log_ranges(range_cap.unwrap_or(0));
    let database_url = empty_database(server, "payments_bench_follower").await?;
    let env = [
        ("CHAINS".to_owned(), format!("evm:31337={}", proxy.url)),
        ("CHAIN_CONFIRMATIONS".to_owned(), "1".to_owned()),
        // The first round starts within 100 ms of the blocks' showing; the rest follow at once.
        ("CHAIN_POLL_INTERVAL_MS".to_owned(), "100".to_owned()),
    ];
    let api = ApiProcess::start(api_bin, &database_url, &env).await?;
    // An intent, so the follower has logs to ask for.
    let answer = reqwest::Client::new()
        .post(format!("http://{}/v1/payment_intents", api.addr))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(BODY)
        .send()
        .await?;
    anyhow::ensure!(
        answer.status() == 201,
        "an intent: {}",
        answer.text().await?
    );

    let mut db = PgConnection::connect(&database_url).await?;
    let node = ProviderBuilder::new().connect_http(rpc_url.parse()?);
    let start = node.get_block_number().await?;
    followed_to(&mut db, start).await?;
    // Mined out of the follower's sight (anvil mines them one after another), then shown at once.
    proxy.lag_by(BLOCKS);
    node.raw_request::<_, serde_json::Value>("anvil_mine".into(), (U64::from(BLOCKS),))
        .await
        .context("anvil_mine")?;
    let logs_before = proxy.served("eth_getLogs");
    let refusals_before = proxy.range_refusals();
    proxy.lag_by(0);
    let began = Instant::now();
    followed_to(&mut db, start + BLOCKS).await?;
    let seconds = began.elapsed().as_secs_f64();
    eprintln!(
        "loadgen: follower caught up {BLOCKS} blocks in {seconds:.1} s (range cap {range_cap:?})"
    );
    Ok(CatchUpRun {
        range_cap,
        blocks: BLOCKS,
        seconds,
        blocks_per_second: BLOCKS as f64 / seconds,
        range_refusals: proxy.range_refusals() - refusals_before,
        logs_calls: proxy.served("eth_getLogs") - logs_before,
    })
}

/// Waits until the follower's cursor is at `block` or past it (at most 5 minutes).
async fn followed_to(db: &mut PgConnection, block: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let cursor: Option<i64> =
            sqlx::query_scalar("SELECT block_number FROM chain_cursors WHERE chain_id = 31337")
                .fetch_optional(&mut *db)
                .await?;
        if cursor.is_some_and(|c| c as u64 >= block) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the follower is at {cursor:?}, not {block}, after 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
