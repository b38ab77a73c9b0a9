//! The payer: pays random `created` intents the way payers do. It fetches the authorization from
//! a random replica, signs it, then either confirms it through the API (the relayer submits it) or
//! submits it on chain itself; now and then it burns the nonce on a transfer of one unit instead,
//! or cancels the authorization on chain (EIP-3009 `cancelAuthorization`).
//! Failures under faults are simply tried again with another intent.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use alloy::{
    network::{EthereumWallet, TransactionBuilder},
    primitives::{Address, B256, Signature, U256},
    providers::{Provider, ProviderBuilder},
    rpc::types::TransactionRequest,
    signers::{SignerSync, local::PrivateKeySigner},
    sol_types::SolCall,
};
use payments_api::chain::{devnet::ANVIL_KEYS, token::Eip3009};
use rand::Rng;
use sqlx::{Connection, PgConnection};

use crate::client::{Shared, TOKENS};

#[derive(Debug, Default, Clone, Copy)]
pub struct Paid {
    pub confirmed: u64,
    pub submitted: u64,
    pub burned: u64,
    pub canceled: u64,
}

pub async fn run(shared: Arc<Shared>, chain_url: String, database_url: String) -> Paid {
    let payer: PrivateKeySigner = ANVIL_KEYS[1].parse().expect("a key");
    let node = ProviderBuilder::new()
        .wallet(EthereumWallet::from(payer.clone()))
        .connect_http(chain_url.parse().expect("a URL"));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let mut paid = Paid::default();
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Some((merchant, id)) = pick(&database_url).await else {
            continue;
        };
        let Some(token) = TOKENS.iter().find(|(_, m)| *m == merchant).map(|(t, _)| *t) else {
            continue;
        };
        let base = &shared.bases[rand::rng().random_range(0..shared.bases.len())];
        let Ok(answer) = http
            .get(format!("{base}/v1/payment_intents/{id}/authorization"))
            .bearer_auth(token)
            .send()
            .await
        else {
            continue;
        };
        let Ok(document) = answer.json::<serde_json::Value>().await else {
            continue;
        };
        let roll = rand::rng().random_range(0..10);
        if roll == 1 {
            if cancel(&node, &payer, &document).await {
                paid.canceled += 1;
            }
        } else if roll == 0 {
            // Burn the nonce: sign the same authorization over one unit, submit it on chain.
            if submit(&node, &payer, &document, Some(U256::from(1))).await {
                paid.burned += 1;
            }
        } else if roll < 5 {
            if submit(&node, &payer, &document, None).await {
                paid.submitted += 1;
            }
        } else {
            let Some(digest) = document["digest"]
                .as_str()
                .and_then(|d| d.parse::<B256>().ok())
            else {
                continue;
            };
            let Ok(signature) = payer.sign_hash_sync(&digest) else {
                continue;
            };
            let body = serde_json::json!({ "signature": format!("0x{}", hex::encode(signature.as_bytes())) });
            // Like every client here, retried with the same key until it has a final answer.
            for _ in 0..100 {
                let base = &shared.bases[rand::rng().random_range(0..shared.bases.len())];
                let answer = http
                    .post(format!("{base}/v1/payment_intents/{id}/confirm"))
                    .bearer_auth(token)
                    .header("idempotency-key", format!("pay-{id}"))
                    .body(body.to_string())
                    .send()
                    .await;
                let (status, error) = match answer {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let body = r.json::<serde_json::Value>().await.unwrap_or_default();
                        (status, body["error"].as_str().unwrap_or("").to_owned())
                    }
                    Err(_) => (0, String::new()),
                };
                if status == 200 {
                    paid.confirmed += 1;
                }
                // A 409 for a key in flight or a lost lease, a 503 or no answer: the same again.
                let retry = status == 0
                    || status == 503
                    || matches!(
                        error.as_str(),
                        "idempotency_key_in_flight" | "idempotency_key_lease_lost"
                    );
                if !retry {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
    paid
}

/// A random `created` intent, by merchant and id.
async fn pick(database_url: &str) -> Option<(String, String)> {
    let mut conn = PgConnection::connect(database_url).await.ok()?;
    sqlx::query_as(
        "SELECT merchant_id, id FROM payment_intents WHERE state = 'created' ORDER BY random() LIMIT 1",
    )
    .fetch_optional(&mut conn)
    .await
    .ok()
    .flatten()
}

/// Signs the authorization in `document` (with `value` instead of its own, to burn the nonce) and
/// sends it from the payer's own account. Whether it was accepted by the node.
async fn submit(
    node: &impl Provider,
    payer: &PrivateKeySigner,
    document: &serde_json::Value,
    value: Option<U256>,
) -> bool {
    let typed = &document["typed_data"];
    let message = &typed["message"];
    let field = |name: &str| message[name].as_str().map(str::to_owned);
    let (Some(from), Some(to), Some(amount), Some(valid_before), Some(nonce)) = (
        field("from"),
        field("to"),
        field("value"),
        field("validBefore"),
        field("nonce"),
    ) else {
        return false;
    };
    let (Ok(from), Ok(to), Ok(amount), Ok(valid_before), Ok(nonce)) = (
        from.parse::<Address>(),
        to.parse::<Address>(),
        amount.parse::<U256>(),
        valid_before.parse::<U256>(),
        nonce.parse::<B256>(),
    ) else {
        return false;
    };
    let mut typed = typed.clone();
    let value = value.unwrap_or(amount);
    typed["message"]["value"] = value.to_string().into();
    let (Some(signature), Some(token)) = (sign_typed(payer, typed), typed_token(document)) else {
        return false;
    };
    let call = Eip3009::transferWithAuthorizationCall {
        from,
        to,
        value,
        validAfter: U256::ZERO,
        validBefore: valid_before,
        nonce,
        v: 27 + u8::from(signature.v()),
        r: signature.r().into(),
        s: signature.s().into(),
    };
    send(node, token, call.abi_encode()).await
}

/// Cancels the authorization in `document` on chain, signed by the payer: the nonce can then
/// never pay. Whether the node accepted the transaction.
async fn cancel(
    node: &impl Provider,
    payer: &PrivateKeySigner,
    document: &serde_json::Value,
) -> bool {
    let typed = &document["typed_data"];
    let Some(nonce) = typed["message"]["nonce"]
        .as_str()
        .and_then(|n| n.parse::<B256>().ok())
    else {
        return false;
    };
    let mut cancel = typed.clone();
    cancel["types"]["CancelAuthorization"] = serde_json::json!([
        {"name": "authorizer", "type": "address"},
        {"name": "nonce", "type": "bytes32"},
    ]);
    cancel["primaryType"] = "CancelAuthorization".into();
    cancel["message"] = serde_json::json!({
        "authorizer": payer.address().to_checksum(None),
        "nonce": nonce.to_string(),
    });
    let (Some(signature), Some(token)) = (sign_typed(payer, cancel), typed_token(document)) else {
        return false;
    };
    let call = CancelAuthorization::cancelAuthorizationCall {
        authorizer: payer.address(),
        nonce,
        v: 27 + u8::from(signature.v()),
        r: signature.r().into(),
        s: signature.s().into(),
    };
    send(node, token, call.abi_encode()).await
}

alloy::sol! {
    /// EIP-3009's cancellation, `v, r, s` form.
    interface CancelAuthorization {
        function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s) external;
    }
}

/// The payer's signature of EIP-712 `typed` data.
fn sign_typed(payer: &PrivateKeySigner, typed: serde_json::Value) -> Option<Signature> {
    let parsed = serde_json::from_value::<alloy::dyn_abi::TypedData>(typed).ok()?;
    payer
        .sign_hash_sync(&parsed.eip712_signing_hash().ok()?)
        .ok()
}

/// Sends `input` to `token` from the payer's account; whether the node accepted it.
async fn send(node: &impl Provider, token: Address, input: Vec<u8>) -> bool {
    let request = TransactionRequest::default()
        .with_to(token)
        .with_input(input);
    node.send_transaction(request).await.is_ok()
}

fn typed_token(document: &serde_json::Value) -> Option<Address> {
    document
        .pointer("/typed_data/domain/verifyingContract")?
        .as_str()?
        .parse()
        .ok()
}
