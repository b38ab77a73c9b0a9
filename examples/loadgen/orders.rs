//! The order workload: what pricing in a currency costs a create. One server serves two anvils
//! (chains 31337 and 31338, each with the devnet token, USDC and the deposit factory); the merchant
//! accepts three assets in usd (the devnet token on both chains, USDC on the first), so an order
//! of 25.00 usd has six options, each by authorization and by deposit address. Fresh orders and
//! fresh fixed intents are created in alternating rounds on that server: nothing is read from a
//! chain at creation (the assets' readings were stored when the merchant accepted them), so the
//! difference is the options' arithmetic, their addresses and the larger row and answer.

use std::{path::Path, time::Duration};

use anyhow::{Context, ensure};
use payments_api::rails::evm::devnet;
use serde::Serialize;
use serde_json::json;

use super::{ApiProcess, Op, TOKEN, Workload, empty_database, settlement::start_anvil_with};

/// A fresh order: 25.00 usd to the merchant's payout address.
pub const ORDER_BODY: &str = r#"{"amount":"25.00","currency":"usd","expires_in_seconds":900}"#;

/// Rounds of each kind, alternated so a noisy stretch of the machine weighs on both.
const ROUNDS: usize = 3;

#[derive(Debug, Serialize)]
pub struct OrderReport {
    pub options: usize,
    /// Requests per second of each round: (fixed intents, orders).
    pub rounds: Vec<(f64, f64)>,
    /// The median over rounds of fixed creates/s over order creates/s: what an order costs
    /// against a fixed intent.
    pub median_cost: f64,
    /// The API's CPU per create, medians over rounds: (fixed, order).
    pub api_cpu_us: (Option<f64>, Option<f64>),
}

pub async fn run(
    api_bin: &Path,
    server: &str,
    api_env: &[(String, String)],
    clients: usize,
    duration: Duration,
) -> anyhow::Result<(OrderReport, Vec<Workload>)> {
    let (_first, first_url) = start_anvil_with(&[])?;
    let (_second, second_url) = start_anvil_with(&["--chain-id", "31338"])?;
    // The same deployer at the same nonces: the same addresses on both chains.
    let set_up = devnet::set_up(&first_url.parse()?).await?;
    devnet::set_up(&second_url.parse()?).await?;
    let factories = [
        format!("evm:31337={}", set_up.deposit_factory),
        format!("evm:31338={}", set_up.deposit_factory),
    ];
    let database_url = empty_database(server, "payments_bench_orders").await?;
    let mut env = vec![
        (
            "CHAINS".to_owned(),
            format!("evm:31337={first_url},evm:31338={second_url}"),
        ),
        ("DEPOSIT_FACTORIES".to_owned(), factories.join(",")),
    ];
    env.extend_from_slice(api_env);
    let api = ApiProcess::start(api_bin, &database_url, &env).await?;
    let (token, usdc) = (set_up.token.to_string(), set_up.usdc.to_string());
    let merchant = json!({
        "payout_address": "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        "accepted_assets": [
            {"chain": "evm:31337", "token": token, "currency": "usd"},
            {"chain": "evm:31337", "token": usdc, "currency": "usd"},
            {"chain": "evm:31338", "token": token, "currency": "usd"},
        ],
    });
    let client = reqwest::Client::new();
    let base = format!("http://{}", api.addr);
    let accepted = client
        .post(format!("{base}/v1/merchant"))
        .bearer_auth(TOKEN)
        .header("idempotency-key", "bench-orders-assets")
        .json(&merchant)
        .send()
        .await?;
    ensure!(
        accepted.status() == 200,
        "accepting the assets: {}",
        accepted.text().await?
    );
    let order: serde_json::Value = client
        .post(format!("{base}/v1/payment_intents"))
        .bearer_auth(TOKEN)
        .body(ORDER_BODY)
        .header("content-type", "application/json")
        .send()
        .await?
        .json()
        .await?;
    let options = order["payment_options"]
        .as_array()
        .context("an order answers its options")?
        .len();
    ensure!(options == 6, "expected six options: {order}");

    let mut workloads = Vec::new();
    let mut rounds = Vec::new();
    for round in 1..=ROUNDS {
        let fixed = super::run(
            &api,
            &format!("create_fixed_round_{round}"),
            clients,
            duration,
            Op::CreateFresh,
        )
        .await;
        let order = super::run(
            &api,
            &format!("create_order_6_options_round_{round}"),
            clients,
            duration,
            Op::CreateOrder,
        )
        .await;
        ensure!(
            fixed.errors == 0 && order.errors == 0,
            "creates failed: {} fixed, {} orders",
            fixed.errors,
            order.errors
        );
        rounds.push((fixed.rps, order.rps));
        workloads.push(fixed);
        workloads.push(order);
    }
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let cpu = |prefix: &str| {
        let measured: Vec<f64> = workloads
            .iter()
            .filter(|w| w.name.starts_with(prefix))
            .filter_map(|w| w.api_cpu_us)
            .collect();
        (!measured.is_empty()).then(|| median(measured))
    };
    let report = OrderReport {
        options,
        median_cost: median(rounds.iter().map(|(fixed, order)| fixed / order).collect()),
        api_cpu_us: (cpu("create_fixed"), cpu("create_order")),
        rounds,
    };
    Ok((report, workloads))
}
