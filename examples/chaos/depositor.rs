//! The depositor: pays deposit intents (`payment_method: deposit_address`) the way people send
//! money from an exchange or a plain wallet, by `transfer`s to the intent's address. It makes
//! its intents through a random replica, retried with their key, in the devnet token or USDC;
//! then pays each one way: in two parts, exactly, beyond its amount, in the other token, after
//! its merchant canceled it, or after it expired (its expiry moved to the past, as the chaos ager
//! does). From its own account
//! (anvil's fifth), funded by the payer before the run, so its nonces are its own.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use alloy::{
    network::{EthereumWallet, TransactionBuilder},
    primitives::{Address, U256},
    providers::{Provider, ProviderBuilder},
    rpc::types::TransactionRequest,
    signers::local::PrivateKeySigner,
    sol_types::SolCall,
};
use payments_api::rails::evm::{devnet::ANVIL_KEYS, token::DevnetUSD};
use rand::Rng;
use sqlx::{Connection, PgConnection};

use crate::{
    client::{Shared, TOKENS},
    payer::post_until_final,
};

/// Anvil's fifth account: the depositor's.
const DEPOSITOR_KEY: &str = "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a";
pub const DEVNET_TOKEN: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
pub const USDC: &str = "0x0C8E79F3534B00D9a3D4a856B665Bf4eBC22f2ba";
pub const MERCHANT: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
/// An hour, as the clients' intents: an intent expires only when the run says so (`expire_now`,
/// the ager), never by the clock while the checker judges, which would add an event after the
/// webhooks were drained.
const EXPIRES_IN: u64 = 3600;

#[derive(Debug, Default, Clone, Copy)]
pub struct Deposited {
    pub intents: u64,
    pub in_two_parts: u64,
    pub exact: u64,
    pub overpaid: u64,
    pub wrong_token: u64,
    pub after_cancel: u64,
    pub late: u64,
}

/// Sends the depositor some of the payer's tokens (before anything else uses the payer's account).
pub async fn fund(chain_url: &str) -> anyhow::Result<()> {
    let depositor: PrivateKeySigner = DEPOSITOR_KEY.parse()?;
    fund_from_payer(chain_url, depositor.address()).await
}

/// Sends `to` 100 000 of each devnet token (the devnet token and USDC) from the payer.
pub async fn fund_from_payer(chain_url: &str, to: Address) -> anyhow::Result<()> {
    let payer: PrivateKeySigner = ANVIL_KEYS[1].parse()?;
    let node = ProviderBuilder::new()
        .wallet(EthereumWallet::from(payer))
        .connect_http(chain_url.parse()?);
    for token in [DEVNET_TOKEN, USDC] {
        let call = DevnetUSD::transferCall {
            to,
            value: U256::from(100_000_000_000u64),
        };
        let request = TransactionRequest::default()
            .with_to(token.parse()?)
            .with_input(call.abi_encode());
        node.send_transaction(request).await?.get_receipt().await?;
    }
    Ok(())
}

/// A deposit intent the depositor made: its merchant's key, id, token, address, amount.
struct Made {
    key: &'static str,
    id: String,
    token: Address,
    address: Address,
    amount: u64,
}

pub async fn run(shared: Arc<Shared>, chain_url: String, database_url: String) -> Deposited {
    let depositor: PrivateKeySigner = DEPOSITOR_KEY.parse().expect("a key");
    let node = ProviderBuilder::new()
        .wallet(EthereumWallet::from(depositor))
        .connect_http(chain_url.parse().expect("a URL"));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let mut done = Deposited::default();
    let mut open: Vec<Made> = Vec::new();
    let mut n = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if open.len() < 4 {
            n += 1;
            if let Some(made) = make(&shared, &http, n).await {
                done.intents += 1;
                open.push(made);
            }
            continue;
        }
        let made = open.remove(rand::rng().random_range(0..open.len()));
        let (token, address, amount) = (made.token, made.address, made.amount);
        let way = rand::rng().random_range(0..10);
        match way {
            0..=2 => {
                let first = amount / 3;
                if send(&node, token, address, U256::from(first)).await
                    && send(&node, token, address, U256::from(amount - first)).await
                {
                    done.in_two_parts += 1;
                }
            }
            3..=4 => {
                if send(&node, token, address, U256::from(amount)).await {
                    done.exact += 1;
                }
            }
            5 => {
                if send(&node, token, address, U256::from(amount + 7)).await {
                    done.overpaid += 1;
                }
            }
            6 => {
                let other: Address =
                    if token == DEVNET_TOKEN.parse::<Address>().expect("an address") {
                        USDC.parse().expect("an address")
                    } else {
                        DEVNET_TOKEN.parse().expect("an address")
                    };
                if send(&node, other, address, U256::from(500)).await {
                    done.wrong_token += 1;
                }
            }
            7 => {
                let path = format!("/v1/payment_intents/{}/cancel", made.id);
                let canceled = post_until_final(
                    &shared,
                    &http,
                    made.key,
                    &path,
                    &format!("cancel-{}", made.id),
                    &serde_json::json!({}),
                )
                .await
                .is_some_and(|(status, _)| status == 200);
                if canceled && send(&node, token, address, U256::from(amount)).await {
                    done.after_cancel += 1;
                }
            }
            _ => {
                // Its time runs out (as the chaos ager does to intents), then the payer sends.
                if expire_now(&database_url, &made.id).await
                    && send(&node, token, address, U256::from(amount)).await
                {
                    done.late += 1;
                }
            }
        }
    }
    done
}

/// Moves the intent's expiry to a second ago, as if its minute had passed.
async fn expire_now(database_url: &str, id: &str) -> bool {
    let Ok(mut conn) = PgConnection::connect(database_url).await else {
        return false;
    };
    sqlx::query("UPDATE payment_intents SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(id)
        .execute(&mut conn)
        .await
        .is_ok_and(|done| done.rows_affected() == 1)
}

/// A new deposit intent of merchant `n % 2` in one of the two tokens; `None` if no replica made it.
async fn make(shared: &Shared, http: &reqwest::Client, n: u64) -> Option<Made> {
    let (key, _) = TOKENS[(n % 2) as usize];
    let token = if n.is_multiple_of(3) {
        USDC
    } else {
        DEVNET_TOKEN
    };
    let amount = rand::rng().random_range(1_000..100_000u64);
    let body = serde_json::json!({
        "chain": "evm:31337", "token": token, "merchant": MERCHANT, "amount": amount.to_string(),
        "payment_method": "deposit_address", "expires_in_seconds": EXPIRES_IN,
    });
    let (status, intent) = post_until_final(
        shared,
        http,
        key,
        "/v1/payment_intents",
        &format!("deposit-intent-{n}"),
        &body,
    )
    .await?;
    if status != 201 {
        return None;
    }
    Some(Made {
        key,
        id: intent["id"].as_str()?.to_owned(),
        token: token.parse().ok()?,
        address: intent["deposit_address"].as_str()?.parse().ok()?,
        amount,
    })
}

/// A plain `transfer` of `amount` of `token` to `to`, sent and included (a fault may lose it).
pub async fn send(
    node: &impl Provider,
    token: Address,
    to: Address,
    amount: impl Into<U256>,
) -> bool {
    let call = DevnetUSD::transferCall {
        to,
        value: amount.into(),
    };
    let request = TransactionRequest::default()
        .with_to(token)
        .with_input(call.abi_encode());
    match node.send_transaction(request).await {
        Ok(pending) => tokio::time::timeout(Duration::from_secs(10), pending.get_receipt())
            .await
            .is_ok_and(|r| r.is_ok_and(|r| r.status())),
        Err(_) => false,
    }
}
