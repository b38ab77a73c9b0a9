//! The payer: pays random `created` intents the way payers do. It fetches the authorization from
//! a random replica, signs it, then either confirms it through the API (the relayer submits it) or
//! submits it on chain itself; now and then it burns the nonce on a transfer of one unit instead,
//! or cancels the authorization on chain (EIP-3009 `cancelAuthorization`). A `permit2` intent's
//! permit is confirmed, or settled through x402's exact proxy by the payer itself.
//! Failures under faults are simply tried again with another intent. Beside the payer, the
//! merchant refunds a quarter of random paid intents: create, sign with the merchant address's
//! key, confirm or submit on chain itself, each request retried with its key like a client's.

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
use payments_api::rails::evm::{
    devnet::ANVIL_KEYS,
    permit2::{ProxyPermit, X402_EXACT_PROXY},
    token::Eip3009,
};
use rand::Rng;
use sqlx::{Connection, PgConnection};

use crate::client::{Shared, TOKENS};

#[derive(Debug, Default, Clone, Copy)]
pub struct Paid {
    pub confirmed: u64,
    pub submitted: u64,
    pub burned: u64,
    pub canceled: u64,
    /// Of those confirmed and submitted, `permit2` intents' permits.
    pub permits_confirmed: u64,
    pub permits_settled: u64,
    /// Refunds created, then confirmed through the API or submitted on chain by the merchant.
    pub refunds: u64,
    pub refunds_confirmed: u64,
    pub refunds_submitted: u64,
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
    let merchant_key: PrivateKeySigner = ANVIL_KEYS[2].parse().expect("a key");
    let merchant_node = ProviderBuilder::new()
        .wallet(EthereumWallet::from(merchant_key.clone()))
        .connect_http(chain_url.parse().expect("a URL"));
    let mut paid = Paid::default();
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if rand::rng().random_range(0..4) == 0 {
            refund(
                &shared,
                &http,
                &database_url,
                &merchant_node,
                &merchant_key,
                &mut paid,
            )
            .await;
        }
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
        let by_permit = document.pointer("/typed_data/primaryType")
            == Some(&serde_json::json!("PermitWitnessTransferFrom"));
        if by_permit && roll < 3 {
            // Anyone holding the signature may send it: the payer settles its permit itself.
            if settle_permit(&node, &payer, &document).await {
                paid.submitted += 1;
                paid.permits_settled += 1;
            }
        } else if by_permit {
            if confirm(&shared, &http, &payer, token, &id, &document).await {
                paid.confirmed += 1;
                paid.permits_confirmed += 1;
            }
        } else if roll == 1 {
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
        } else if confirm(&shared, &http, &payer, token, &id, &document).await {
            paid.confirmed += 1;
        }
    }
    paid
}

/// Signs the document's digest (an EIP-3009 authorization or a Permit2 permit alike) and confirms
/// intent `id` with it, retried under its key until final; whether it was confirmed.
async fn confirm(
    shared: &Shared,
    http: &reqwest::Client,
    payer: &PrivateKeySigner,
    token: &str,
    id: &str,
    document: &serde_json::Value,
) -> bool {
    let Some(digest) = document["digest"]
        .as_str()
        .and_then(|d| d.parse::<B256>().ok())
    else {
        return false;
    };
    let Ok(signature) = payer.sign_hash_sync(&digest) else {
        return false;
    };
    let body =
        serde_json::json!({ "signature": format!("0x{}", hex::encode(signature.as_bytes())) });
    let path = format!("/v1/payment_intents/{id}/confirm");
    post_until_final(shared, http, token, &path, &format!("pay-{id}"), &body)
        .await
        .is_some_and(|(status, _)| status == 200)
}

/// Signs the permit in a `permit2` intent's document and sends it to x402's exact proxy from the
/// payer's own account, as anyone holding the signature may. Whether the node accepted it.
async fn settle_permit(
    node: &impl Provider,
    payer: &PrivateKeySigner,
    document: &serde_json::Value,
) -> bool {
    let field = |pointer: &str| {
        document
            .pointer(&format!("/typed_data/message{pointer}"))
            .and_then(|v| v.as_str())
    };
    let number = |pointer: &str| field(pointer).and_then(|n| n.parse::<U256>().ok());
    let address = |pointer: &str| field(pointer).and_then(|a| a.parse::<Address>().ok());
    let (Some(token), Some(amount), Some(to), Some(nonce), Some(deadline), Some(valid_after)) = (
        address("/permitted/token"),
        number("/permitted/amount"),
        address("/witness/to"),
        number("/nonce"),
        number("/deadline"),
        number("/witness/validAfter"),
    ) else {
        return false;
    };
    let permit = ProxyPermit {
        chain_id: 31337,
        token,
        amount,
        owner: payer.address(),
        to,
        nonce,
        deadline,
        valid_after,
        facilitator: None,
        token_permit: None,
    };
    let Ok(signature) = payer.sign_hash_sync(&permit.digest()) else {
        return false;
    };
    let calldata = permit.settle_calldata(amount, signature.as_bytes().to_vec().into());
    send(node, X402_EXACT_PROXY, calldata.to_vec()).await
}

/// POSTs `body` to `path` on random replicas under `key`, like every client here retried with
/// the same key until it has a final answer (or a hundred tries passed): its status and body.
pub async fn post_until_final(
    shared: &Shared,
    http: &reqwest::Client,
    token: &str,
    path: &str,
    key: &str,
    body: &serde_json::Value,
) -> Option<(u16, serde_json::Value)> {
    for _ in 0..100 {
        let base = &shared.bases[rand::rng().random_range(0..shared.bases.len())];
        let answer = http
            .post(format!("{base}{path}"))
            .bearer_auth(token)
            .header("idempotency-key", key)
            .body(body.to_string())
            .send()
            .await;
        let (status, body) = match answer {
            Ok(r) => {
                let status = r.status().as_u16();
                (
                    status,
                    r.json::<serde_json::Value>().await.unwrap_or_default(),
                )
            }
            Err(_) => (0, serde_json::Value::Null),
        };
        // A 409 for a key in flight or a lost lease, a 503 or no answer: the same again.
        let retry = status == 0
            || status == 503
            || matches!(
                body["error"].as_str(),
                Some("idempotency_key_in_flight" | "idempotency_key_lease_lost")
            );
        if !retry {
            return Some((status, body));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    None
}

/// The merchant refunds a quarter of a random paid intent, then signs the refund with its
/// address's key and confirms it through the API, or (one time in three) submits it on chain.
async fn refund(
    shared: &Shared,
    http: &reqwest::Client,
    database_url: &str,
    node: &impl Provider,
    merchant_key: &PrivateKeySigner,
    paid: &mut Paid,
) {
    let Some((merchant, intent, amount)) = pick_paid(database_url).await else {
        return;
    };
    let Some(token) = TOKENS.iter().find(|(_, m)| *m == merchant).map(|(t, _)| *t) else {
        return;
    };
    let quarter =
        (amount.parse::<U256>().unwrap_or(U256::from(4)) / U256::from(4)).max(U256::from(1));
    let key = format!("refund-{intent}-{}", rand::rng().random::<u32>());
    let path = format!("/v1/payment_intents/{intent}/refunds");
    let body = serde_json::json!({ "amount": quarter.to_string() });
    let Some((201, created)) = post_until_final(shared, http, token, &path, &key, &body).await
    else {
        return;
    };
    paid.refunds += 1;
    let Some(id) = created["id"].as_str() else {
        return;
    };
    let base = &shared.bases[rand::rng().random_range(0..shared.bases.len())];
    let Ok(answer) = http
        .get(format!("{base}/v1/refunds/{id}/authorization"))
        .bearer_auth(token)
        .send()
        .await
    else {
        return;
    };
    let Ok(document) = answer.json::<serde_json::Value>().await else {
        return;
    };
    if rand::rng().random_range(0..3) == 0 {
        if submit(node, merchant_key, &document, None).await {
            paid.refunds_submitted += 1;
        }
        return;
    }
    let Some(signature) = document["digest"]
        .as_str()
        .and_then(|d| d.parse::<B256>().ok())
        .and_then(|digest| merchant_key.sign_hash_sync(&digest).ok())
    else {
        return;
    };
    let body =
        serde_json::json!({ "signature": format!("0x{}", hex::encode(signature.as_bytes())) });
    let path = format!("/v1/refunds/{id}/confirm");
    if post_until_final(shared, http, token, &path, &format!("confirm-{id}"), &body)
        .await
        .is_some_and(|(status, _)| status == 200)
    {
        paid.refunds_confirmed += 1;
    }
}

/// A random paid intent with something left to refund: merchant, id, amount.
async fn pick_paid(database_url: &str) -> Option<(String, String, String)> {
    let mut conn = PgConnection::connect(database_url).await.ok()?;
    sqlx::query_as(
        "SELECT merchant_id, id, amount::text FROM payment_intents
          WHERE settlement IS NOT NULL AND amount_refunded < amount AND currency IS NULL
          ORDER BY random() LIMIT 1",
    )
    .fetch_optional(&mut conn)
    .await
    .ok()
    .flatten()
}

/// A random `created` intent, by merchant and id.
async fn pick(database_url: &str) -> Option<(String, String)> {
    let mut conn = PgConnection::connect(database_url).await.ok()?;
    sqlx::query_as(
        "SELECT merchant_id, id FROM payment_intents WHERE state = 'created' AND currency IS NULL
          ORDER BY random() LIMIT 1",
    )
    .fetch_optional(&mut conn)
    .await
    .ok()
    .flatten()
}

/// Signs the authorization in `document` (with `value` instead of its own, to burn the nonce) with
/// its authorizer's key and sends it from the authorizer's own account. Whether it was accepted
/// by the node.
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
