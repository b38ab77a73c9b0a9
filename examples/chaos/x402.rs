//! x402 payers: each signs a payment of the devnet token to the demo merchant, in turn by EIP-3009,
//! by Permit2 for x402's exact proxy, and by Permit2 for its upto proxy (charging part of the
//! ceiling), and settles it through `/x402/settle` the way resource servers do under faults: once under an
//! Idempotency-Key, retried with it until the answer is final, then replayed; beside it, unkeyed
//! duplicates sent at once to random replicas, as concurrent requests carrying one
//! `PAYMENT-SIGNATURE` would be. Every answer is recorded for the checker, whose invariant is that
//! no payment was answered `success: true` twice except to retries of one key.

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use alloy::{
    primitives::{Address, B256, U256},
    signers::{SignerSync, local::PrivateKeySigner},
};
use payments_api::rails::evm::{
    authorization::Authorization,
    devnet::ANVIL_KEYS,
    permit2::{PERMIT2, ProxyPermit},
    token::DevnetUSD,
};
use rand::Rng;

use crate::client::Shared;

const TOKEN: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const MERCHANT_ADDRESS: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
const MERCHANT_TOKEN: &str = "merchant-demo";
/// Unkeyed duplicates sent beside each keyed settle.
const DUPLICATES: usize = 3;

/// One `/x402/settle` answer.
#[derive(Debug, Clone)]
pub struct X402Answer {
    /// The payment's nonce.
    pub nonce: String,
    pub key: Option<String>,
    pub success: bool,
    pub transaction: String,
    pub error_reason: Option<String>,
}

/// Payments settled, and answers that said success.
#[derive(Debug, Default, Clone, Copy)]
pub struct Settled {
    pub payments: u64,
    pub successes: u64,
}

/// The payer lets Permit2 move its devnet tokens, as a wallet does once per token.
pub async fn approve_permit2(chain_url: &str) -> anyhow::Result<()> {
    use alloy::{
        network::{EthereumWallet, TransactionBuilder},
        providers::{Provider, ProviderBuilder},
        rpc::types::TransactionRequest,
        sol_types::SolCall,
    };
    let payer: PrivateKeySigner = ANVIL_KEYS[1].parse()?;
    let node = ProviderBuilder::new()
        .wallet(EthereumWallet::from(payer))
        .connect_http(chain_url.parse()?);
    let call = DevnetUSD::approveCall {
        spender: PERMIT2,
        value: U256::MAX,
    };
    let request = TransactionRequest::default()
        .with_to(TOKEN.parse()?)
        .with_input(call.abi_encode());
    node.send_transaction(request).await?.get_receipt().await?;
    Ok(())
}

pub async fn run(shared: Arc<Shared>) -> Settled {
    let payer: PrivateKeySigner = ANVIL_KEYS[1].parse().expect("a key");
    // The replicas' relayer key: the facilitator an upto payment names.
    let relayer: PrivateKeySigner = ANVIL_KEYS[3].parse().expect("a key");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let mut settled = Settled::default();
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let (nonce, body) = match settled.payments % 3 {
            0 => signed_payment(&payer),
            1 => signed_permit(&payer, None),
            _ => signed_permit(&payer, Some(relayer.address())),
        };
        let key = format!("x402-{nonce}");
        let keyed = settle_until_final(&shared, &http, &nonce, &body, &key);
        let duplicates = (0..DUPLICATES).map(|_| settle_once(&shared, &http, &nonce, &body, None));
        let (answer, _) = tokio::join!(keyed, futures::future::join_all(duplicates));
        settled.payments += 1;
        if answer.is_some_and(|a| a.success) {
            settled.successes += 1;
            // The same key again: the same answer, replayed.
            settle_once(&shared, &http, &nonce, &body, Some(&key)).await;
        }
    }
    settled
}

/// A payment of a random amount, signed by the payer: its nonce, and the settle body.
fn signed_payment(payer: &PrivateKeySigner) -> (String, serde_json::Value) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let nonce = B256::from(rand::rng().random::<[u8; 32]>());
    let value = U256::from(rand::rng().random_range(1..1000u64));
    let authorization = Authorization {
        chain_id: 31337,
        token: TOKEN.parse::<Address>().expect("an address"),
        token_name: "Devnet USD".to_owned(),
        token_version: "1".to_owned(),
        from: payer.address(),
        to: MERCHANT_ADDRESS.parse().expect("an address"),
        value,
        valid_after: 0,
        // Generous: faults and restarts must not make the chaos run's payments expire.
        valid_before: now + 3 * 3600,
        nonce,
    };
    let signature = payer
        .sign_hash_sync(&authorization.digest())
        .expect("signing with a local key");
    let requirements = serde_json::json!({
        "scheme": "exact", "network": "eip155:31337", "amount": value.to_string(), "asset": TOKEN,
        "payTo": MERCHANT_ADDRESS, "maxTimeoutSeconds": 60,
        "extra": {"name": "Devnet USD", "version": "1"},
    });
    let body = serde_json::json!({
        "x402Version": 2,
        "paymentPayload": {
            "x402Version": 2,
            "accepted": requirements,
            "payload": {
                "signature": format!("0x{}", hex::encode(signature.as_bytes())),
                "authorization": {
                    "from": payer.address().to_checksum(None),
                    "to": MERCHANT_ADDRESS,
                    "value": value.to_string(),
                    "validAfter": "0",
                    "validBefore": authorization.valid_before.to_string(),
                    "nonce": nonce.to_string(),
                },
            },
        },
        "paymentRequirements": requirements,
    });
    (nonce.to_string(), body)
}

/// A payment by Permit2 of a random amount, signed by the payer for x402's exact proxy, or for its
/// upto proxy naming `facilitator` (the settle then charges half the ceiling, rounded up): its
/// nonce as the payment's key holds it, and the settle body.
fn signed_permit(
    payer: &PrivateKeySigner,
    facilitator: Option<Address>,
) -> (String, serde_json::Value) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let amount = rand::rng().random_range(2..1000u64);
    let permit = ProxyPermit {
        chain_id: 31337,
        token: TOKEN.parse().expect("an address"),
        amount: U256::from(amount),
        owner: payer.address(),
        to: MERCHANT_ADDRESS.parse().expect("an address"),
        nonce: U256::from_be_bytes(rand::rng().random::<[u8; 32]>()),
        // Generous, as for EIP-3009 above.
        deadline: U256::from(now + 3 * 3600),
        valid_after: U256::ZERO,
        facilitator,
        token_permit: None,
    };
    let signature = payer
        .sign_hash_sync(&permit.digest())
        .expect("signing with a local key");
    let scheme = if facilitator.is_some() {
        "upto"
    } else {
        "exact"
    };
    let accepted = serde_json::json!({
        "scheme": scheme, "network": "eip155:31337", "amount": amount.to_string(), "asset": TOKEN,
        "payTo": MERCHANT_ADDRESS, "maxTimeoutSeconds": 60,
        "extra": {"assetTransferMethod": "permit2"},
    });
    let mut required = accepted.clone();
    if facilitator.is_some() {
        required["amount"] = serde_json::json!(amount.div_ceil(2).to_string());
    }
    let mut witness = serde_json::json!({"to": MERCHANT_ADDRESS, "validAfter": "0"});
    if let Some(facilitator) = facilitator {
        witness["facilitator"] = serde_json::json!(facilitator.to_checksum(None));
    }
    let body = serde_json::json!({
        "x402Version": 2,
        "paymentPayload": {
            "x402Version": 2,
            "accepted": accepted,
            "payload": {
                "signature": format!("0x{}", hex::encode(signature.as_bytes())),
                "permit2Authorization": {
                    "from": payer.address().to_checksum(None),
                    "permitted": {"token": TOKEN, "amount": amount.to_string()},
                    "spender": permit.spender().to_checksum(None),
                    "nonce": permit.nonce.to_string(),
                    "deadline": permit.deadline.to_string(),
                    "witness": witness,
                },
            },
        },
        "paymentRequirements": required,
    });
    (B256::from(permit.nonce).to_string(), body)
}

/// Settles under `key` on random replicas until the answer is final: retried on no answer, 503,
/// 409 and `settlement_pending`, as a resource server that keeps its key would.
async fn settle_until_final(
    shared: &Shared,
    http: &reqwest::Client,
    nonce: &str,
    body: &serde_json::Value,
    key: &str,
) -> Option<X402Answer> {
    for _ in 0..100 {
        if let Some(answer) = settle_once(shared, http, nonce, body, Some(key)).await
            && answer.error_reason.as_deref() != Some("settlement_pending")
        {
            return Some(answer);
        }
        if shared
            .give_up_at
            .lock()
            .unwrap()
            .is_some_and(|at| std::time::Instant::now() > at)
        {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    None
}

/// One settle on a random replica; its answer if it was a settle answer (200), recorded.
async fn settle_once(
    shared: &Shared,
    http: &reqwest::Client,
    nonce: &str,
    body: &serde_json::Value,
    key: Option<&str>,
) -> Option<X402Answer> {
    let base = &shared.bases[rand::rng().random_range(0..shared.bases.len())];
    let mut request = http
        .post(format!("{base}/x402/settle"))
        .bearer_auth(MERCHANT_TOKEN)
        .body(body.to_string());
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.ok()?;
    if response.status() != 200 {
        return None;
    }
    let answer: serde_json::Value = response.json().await.ok()?;
    let answer = X402Answer {
        nonce: nonce.to_owned(),
        key: key.map(str::to_owned),
        success: answer["success"] == true,
        transaction: answer["transaction"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        error_reason: answer["errorReason"].as_str().map(str::to_owned),
    };
    shared.x402_answers.lock().unwrap().push(answer.clone());
    Some(answer)
}
