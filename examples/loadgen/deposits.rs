//! The deposit-address workload (`docs/settlement.md`, "Deposit addresses"): `open` open deposit
//! intents, then one block holding `transfers` plain transfers, each paying one of them in full.
//! Measures the listener's time for that block, from the moment it is mined: until its transfers
//! are observed (one `eth_getLogs` for the token, one indexed lookup of every recipient), and
//! until every one is applied (counted, its intent paid with its event, booked, its sweep
//! queued). Run at two sizes of the open set, its cost should not grow with it.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use alloy::primitives::{Address, keccak256};
use anyhow::{Context, bail};
use payments_api::rails::evm::{deposit::devnet_factory, devnet};
use serde::Serialize;
use serde_json::json;
use sqlx::{Connection as _, PgConnection};

use super::{ApiProcess, TOKEN, empty_database, settlement::start_anvil_with};

/// The devnet token, and what each transfer pays.
const DEVNET_TOKEN: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const AMOUNT: u64 = 1_000_000;
/// Anvil's first funded account after the deployer, the devnet's payer.
const PAYER: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const MERCHANT: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";

#[derive(Debug, Serialize)]
pub struct DepositRun {
    pub open_intents: usize,
    pub transfers: usize,
    /// From the block's mining to all its transfers recorded as observations.
    pub observed_ms: f64,
    /// From the block's mining to all of them applied: every intent `succeeded`.
    pub applied_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct DepositReport {
    pub runs: Vec<DepositRun>,
}

pub async fn run(
    api_bin: &Path,
    server: &str,
    sizes: &[usize],
    transfers: usize,
) -> anyhow::Result<DepositReport> {
    let mut runs = Vec::new();
    for &open in sizes {
        runs.push(one_block(api_bin, server, open.max(transfers), transfers).await?);
    }
    Ok(DepositReport { runs })
}

async fn one_block(
    api_bin: &Path,
    server: &str,
    open: usize,
    transfers: usize,
) -> anyhow::Result<DepositRun> {
    // Room for a thousand transfers to fresh addresses (about 50 000 gas each) in one block.
    let (_anvil, rpc_url) = start_anvil_with(&["--gas-limit", "300000000"])?;
    devnet::set_up(&rpc_url.parse()?).await?;
    let database_url = empty_database(server, "payments_bench_deposits").await?;
    let env = [
        ("CHAINS".to_owned(), format!("evm:31337={rpc_url}")),
        ("CHAIN_CONFIRMATIONS".to_owned(), "1".to_owned()),
        ("CHAIN_POLL_INTERVAL_MS".to_owned(), "50".to_owned()),
        (
            "DEPOSIT_FACTORIES".to_owned(),
            format!("evm:31337={}", devnet_factory()),
        ),
    ];
    let api = ApiProcess::start(api_bin, &database_url, &env).await?;
    let client = reqwest::Client::new();
    let created: serde_json::Value = client
        .post(format!("http://{}/v1/payment_intents", api.addr))
        .bearer_auth(TOKEN)
        .json(&json!({
            "chain": "evm:31337", "token": DEVNET_TOKEN, "merchant": MERCHANT,
            "amount": AMOUNT.to_string(), "payment_method": "deposit_address",
            "expires_in_seconds": 86_400,
        }))
        .send()
        .await?
        .json()
        .await?;
    let template = created["id"]
        .as_str()
        .context("a deposit intent")?
        .to_owned();

    // The open set, copied from the one the API made (the addresses need only be distinct).
    eprintln!("loadgen: {open} open deposit intents");
    let mut db = PgConnection::connect(&database_url).await?;
    let addresses: Vec<String> = (1..open)
        .map(|i| Address::from_word(keccak256(format!("bench-deposit-{i}"))).to_checksum(None))
        .collect();
    for (chunk_index, chunk) in addresses.chunks(10_000).enumerate() {
        let ids: Vec<String> = (0..chunk.len())
            .map(|i| format!("pi_{:024x}", chunk_index * 10_000 + i + 1))
            .collect();
        sqlx::query(
            "INSERT INTO payment_intents (merchant_id, id, state, version, amount, chain, token, payee, expires_at,
                                          metadata, chain_nonce, client_secret, payment_method, deposit_address)
             SELECT t.merchant_id, a.id, 'created', 1, t.amount, t.chain, t.token, t.payee, t.expires_at,
                    t.metadata, sha256(convert_to(a.id, 'UTF8')), a.id || '_secret_bench', 'deposit_address', a.address
               FROM payment_intents t, unnest($1::text[], $2::text[]) AS a (id, address)
              WHERE t.id = $3",
        )
        .bind(&ids)
        .bind(chunk)
        .bind(&template)
        .execute(&mut db)
        .await?;
    }
    sqlx::query("ANALYZE payment_intents")
        .execute(&mut db)
        .await?;

    // One block: `transfers` transfers, to the first `transfers` addresses.
    let rpc = |method: &'static str, params: serde_json::Value| {
        let (client, url) = (client.clone(), rpc_url.clone());
        async move {
            let answer: serde_json::Value = client
                .post(&url)
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
                .send()
                .await?
                .json()
                .await?;
            if let Some(error) = answer.get("error") {
                bail!("{method}: {error}");
            }
            Ok(answer["result"].clone())
        }
    };
    rpc("evm_setAutomine", json!([false])).await?;
    let mut recipients = vec![
        created["deposit_address"]
            .as_str()
            .context("its address")?
            .to_owned(),
    ];
    recipients.extend(addresses.iter().take(transfers - 1).cloned());
    for to in &recipients {
        let data = format!(
            "0xa9059cbb{:0>64}{:064x}",
            to.trim_start_matches("0x").to_lowercase(),
            AMOUNT
        );
        rpc(
            "eth_sendTransaction",
            json!([{"from": PAYER, "to": DEVNET_TOKEN, "data": data, "gas": "0x186a0"}]),
        )
        .await?;
    }
    rpc("evm_mine", json!([])).await?;
    let mined = Instant::now();
    let block = rpc("eth_getBlockByNumber", json!(["latest", false])).await?;
    let number = u64::from_str_radix(
        block["number"]
            .as_str()
            .context("a block number")?
            .trim_start_matches("0x"),
        16,
    )?;
    let included = block["transactions"].as_array().map_or(0, Vec::len);
    anyhow::ensure!(
        included == transfers,
        "the block holds {included} transactions, not {transfers}"
    );

    let (mut observed, mut applied) = (None, None);
    let deadline = mined + Duration::from_secs(300);
    while applied.is_none() {
        let (seen, done): (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(applied_at) FROM chain_observations
              WHERE kind = 'deposit_received' AND block_number = $1",
        )
        .bind(number as i64)
        .fetch_one(&mut db)
        .await?;
        if observed.is_none() && seen as usize == transfers {
            observed = Some(mined.elapsed());
        }
        if done as usize == transfers {
            applied = Some(mined.elapsed());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{done} of {transfers} applied after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let succeeded: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM payment_intents WHERE state = 'succeeded' AND payment_method = 'deposit_address'",
    )
    .fetch_one(&mut db)
    .await?;
    anyhow::ensure!(
        succeeded as usize == transfers,
        "{succeeded} intents succeeded, not {transfers}"
    );
    drop(api);
    let ms = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
    Ok(DepositRun {
        open_intents: open,
        transfers,
        observed_ms: ms(observed),
        applied_ms: ms(applied),
    })
}
