//! Orders under faults (`docs/settlement.md`, "Orders and options"). The merchant accepts three
//! assets in usd (the devnet token on both chains, USDC on the first), so each order has six
//! options on two chains. The orderer makes orders through random replicas, retried with their
//! key, and pays each one of three ways: racing confirms of two or three authorization options
//! at once through different replicas (a payer clicking on two tabs); paying twice by deposit, at
//! two options' addresses on one chain or both; or a confirm, then a deposit at another option's
//! address. Its checks read both chains: one payment per order, every duplicate recorded once and
//! booked once, at most one confirm of an order answered 200.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use alloy::{
    network::EthereumWallet,
    primitives::{Address, B256, U256},
    providers::{Provider, ProviderBuilder},
    rpc::types::Filter,
    signers::{SignerSync, local::PrivateKeySigner},
    sol_types::SolEvent,
};
use payments_api::rails::evm::{devnet::ANVIL_KEYS, token::Eip3009};
use rand::{Rng, seq::SliceRandom};
use sqlx::PgPool;

use crate::{
    checker::{Row, row},
    client::{Shared, TOKENS},
    depositor::{DEVNET_TOKEN, MERCHANT, USDC, fund_from_payer, send},
    payer::post_until_final,
};

/// Anvil's seventh account: the orderer's, for its deposits (its nonces are its own).
const ORDERER_KEY: &str = "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e";

/// The two chains an order's options are on, with their RPC URLs.
pub type Chains = [(String, String); 2];

/// What the orderer did, and every confirm answer it got: (order, option, status).
#[derive(Debug, Default)]
pub struct Ordered {
    pub orders: u64,
    pub raced: u64,
    pub deposited_twice: u64,
    pub confirmed_then_deposited: u64,
    /// Orders paid twice of which a transfer was not seen included (a chain fault may lose one).
    pub deposits_lost: u64,
    pub confirms: Vec<(String, String, u16)>,
}

/// Sends the orderer some of the payer's tokens on every chain.
pub async fn fund(chains: &Chains) -> anyhow::Result<()> {
    let orderer: PrivateKeySigner = ORDERER_KEY.parse()?;
    for (_, url) in chains {
        fund_from_payer(url, orderer.address()).await?;
    }
    Ok(())
}

/// The merchant's payout address and the assets its orders are paid in.
pub async fn accept_assets(shared: &Shared, chains: &Chains) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let (first, second) = (&chains[0].0, &chains[1].0);
    let body = serde_json::json!({
        "payout_address": MERCHANT,
        "accepted_assets": [
            {"chain": first, "token": DEVNET_TOKEN, "currency": "usd"},
            {"chain": first, "token": USDC, "currency": "usd"},
            {"chain": second, "token": DEVNET_TOKEN, "currency": "usd"},
        ],
    });
    let (key, _) = TOKENS[0];
    match post_until_final(shared, &http, key, "/v1/merchant", "accept-assets", &body).await {
        Some((200, _)) => Ok(()),
        other => anyhow::bail!("accepting the assets: {other:?}"),
    }
}

/// An option of an order as the orderer pays it.
#[derive(Clone)]
struct Choice {
    id: String,
    chain: String,
    token: Address,
    amount: U256,
    deposit_address: Option<Address>,
}

pub async fn run(shared: Arc<Shared>, chains: Chains) -> Ordered {
    let orderer: PrivateKeySigner = ORDERER_KEY.parse().expect("a key");
    let nodes: HashMap<String, _> = chains
        .iter()
        .map(|(name, url)| {
            let node = ProviderBuilder::new()
                .wallet(EthereumWallet::from(orderer.clone()))
                .connect_http(url.parse().expect("a URL"));
            (name.clone(), node)
        })
        .collect();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let mut done = Ordered::default();
    let mut n = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(400)).await;
        n += 1;
        let Some((id, options)) = make(&shared, &http, n).await else {
            continue;
        };
        done.orders += 1;
        let mut by_authorization: Vec<Choice> = options
            .iter()
            .filter(|o| o.deposit_address.is_none())
            .cloned()
            .collect();
        let mut by_deposit: Vec<Choice> = options
            .iter()
            .filter(|o| o.deposit_address.is_some())
            .cloned()
            .collect();
        by_authorization.shuffle(&mut rand::rng());
        by_deposit.shuffle(&mut rand::rng());
        // A transfer a chain fault lost (its node restarting, its block reorged away) is sent
        // again, backing off past a restart: any number that lands is a payment the checks count.
        let deposit = |choice: &Choice| {
            use backon::Retryable;
            let node = &nodes[&choice.chain];
            let (token, to, amount) = (
                choice.token,
                choice.deposit_address.expect("a deposit option"),
                choice.amount,
            );
            let attempt = move || async move {
                send(node, token, to, amount)
                    .await
                    .then_some(())
                    .ok_or("the transfer was not seen included")
            };
            let backoff = backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(500))
                .with_max_times(5);
            async move { attempt.retry(backoff).await.is_ok() }
        };
        let (way, racing) = (
            rand::rng().random_range(0..3),
            rand::rng().random_range(2..=3).min(by_authorization.len()),
        );
        match way {
            0 => {
                let answers = race(&shared, &http, &id, &by_authorization[..racing]).await;
                done.confirms.extend(answers);
                done.raced += 1;
            }
            1 if by_deposit.len() >= 2 => {
                let first = deposit(&by_deposit[0]).await;
                let second = deposit(&by_deposit[1]).await;
                if first && second {
                    done.deposited_twice += 1;
                } else {
                    done.deposits_lost += 1;
                }
            }
            _ => {
                let answers = race(&shared, &http, &id, &by_authorization[..1]).await;
                done.confirms.extend(answers);
                if let Some(choice) = by_deposit.first()
                    && deposit(choice).await
                {
                    done.confirmed_then_deposited += 1;
                }
            }
        }
    }
    done
}

/// A new order of merchant_demo priced between 0.01 and 9.99 usd, and its options.
async fn make(shared: &Shared, http: &reqwest::Client, n: u64) -> Option<(String, Vec<Choice>)> {
    let (key, _) = TOKENS[0];
    let cents = rand::rng().random_range(1..1000u32);
    let body = serde_json::json!({
        "amount": format!("{}.{:02}", cents / 100, cents % 100), "currency": "usd",
        "expires_in_seconds": 3600,
    });
    let (status, order) = post_until_final(
        shared,
        http,
        key,
        "/v1/payment_intents",
        &format!("order-{n}"),
        &body,
    )
    .await?;
    if status != 201 {
        return None;
    }
    let options = order["payment_options"]
        .as_array()?
        .iter()
        .filter_map(|o| {
            Some(Choice {
                id: o["id"].as_str()?.to_owned(),
                chain: o["chain"].as_str()?.to_owned(),
                token: o["token"].as_str()?.parse().ok()?,
                amount: o["amount"].as_str()?.parse().ok()?,
                deposit_address: o["deposit_address"].as_str().and_then(|a| a.parse().ok()),
            })
        })
        .collect();
    Some((order["id"].as_str()?.to_owned(), options))
}

/// Signs each option's authorization for the payer, then confirms them all at once, each under
/// its own key through a random replica: (order, option, final status) of each.
async fn race(
    shared: &Arc<Shared>,
    http: &reqwest::Client,
    id: &str,
    options: &[Choice],
) -> Vec<(String, String, u16)> {
    let payer: PrivateKeySigner = ANVIL_KEYS[1].parse().expect("a key");
    let (token, _) = TOKENS[0];
    let mut signed = Vec::new();
    for option in options {
        let Some(digest) = document_digest(shared, http, token, id, &option.id, &payer).await
        else {
            continue;
        };
        let Ok(signature) = payer.sign_hash_sync(&digest) else {
            continue;
        };
        signed.push((option.id.clone(), signature));
    }
    let confirms = signed.into_iter().map(|(option, signature)| {
        let (shared, http, id) = (shared.clone(), http.clone(), id.to_owned());
        let payer = payer.address().to_checksum(None);
        tokio::spawn(async move {
            let body = serde_json::json!({
                "option": option, "payer": payer,
                "signature": format!("0x{}", hex::encode(signature.as_bytes())),
            });
            let path = format!("/v1/payment_intents/{id}/confirm");
            let key = format!("order-confirm-{id}-{option}");
            let answer = post_until_final(&shared, &http, token, &path, &key, &body).await;
            answer.map(|(status, _)| (id, option, status))
        })
    });
    let mut answers = Vec::new();
    for confirm in futures::future::join_all(confirms).await {
        if let Ok(Some(answer)) = confirm {
            answers.push(answer);
        }
    }
    answers
}

/// The digest of the payer's authorization of `option`, from a random replica (a few tries).
async fn document_digest(
    shared: &Shared,
    http: &reqwest::Client,
    token: &str,
    id: &str,
    option: &str,
    payer: &PrivateKeySigner,
) -> Option<B256> {
    for _ in 0..10 {
        let base = &shared.bases[rand::rng().random_range(0..shared.bases.len())];
        let answer = http
            .get(format!(
                "{base}/v1/payment_intents/{id}/authorization?option={option}&payer={}",
                payer.address()
            ))
            .bearer_auth(token)
            .send()
            .await;
        match answer {
            Ok(answer) if answer.status() == 200 => {
                let document: serde_json::Value = answer.json().await.ok()?;
                return document["digest"].as_str()?.parse().ok();
            }
            // Expired by the ager, or already paid: nothing to sign.
            Ok(answer) if answer.status().is_client_error() => return None,
            _ => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
    None
}

/// An order as the checks read it.
#[derive(sqlx::FromRow)]
struct OrderRow {
    id: String,
    state: String,
    chain: Option<String>,
    token: Option<String>,
    payment_method: Option<String>,
    selected_option: Option<String>,
    deposit_address: Option<String>,
    settled_by: Option<String>,
    nonce: Vec<u8>,
    amount_received: String,
    /// `[{transaction_hash, amount, token, chain, deposit_address}, …]`.
    duplicates: sqlx::types::Json<Vec<serde_json::Value>>,
}

/// A confirmed `Transfer` into one of an order's options' addresses.
struct Arrived {
    order: String,
    chain: String,
    address: String,
    token: String,
    transaction: String,
    log_index: i32,
    value: U256,
}

/// The orders' checks, against the database and both chains.
pub async fn check(
    pool: &PgPool,
    chains: &Chains,
    confirmations: u64,
    ordered: &Ordered,
) -> anyhow::Result<Vec<Row>> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let orders: Vec<OrderRow> = sqlx::query_as(
        "SELECT id, state, chain, token, payment_method, selected_option, deposit_address, \
                settlement->>'transaction_hash' AS settled_by, chain_nonce AS nonce, \
                amount_received::text AS amount_received, duplicate_payments AS duplicates \
           FROM payment_intents WHERE currency IS NOT NULL",
    )
    .fetch_all(&mut *tx)
    .await?;
    let addresses: Vec<(String, String, String)> =
        sqlx::query_as("SELECT chain, deposit_address, intent_id FROM payment_option_addresses")
            .fetch_all(&mut *tx)
            .await?;
    let booked: HashSet<(String, String, i32)> = sqlx::query_as(
        "SELECT e.chain, e.transaction_hash, e.log_index FROM ledger_entries e \
           JOIN payment_intents p ON p.merchant_id = e.merchant_id AND p.id = e.intent_id \
          WHERE e.kind = 'deposit' AND p.currency IS NOT NULL",
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect();
    let submissions: HashMap<String, i64> = sqlx::query_as(
        "SELECT subject, count(*) FROM chain_submissions WHERE kind = 'intent_payment' GROUP BY subject",
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect();
    tx.commit().await?;

    let by_nonce: HashMap<B256, &OrderRow> = orders
        .iter()
        .map(|o| (B256::from_slice(&o.nonce), o))
        .collect();
    // (order) -> (chain, transaction) of each confirmed use of its nonce, on either chain.
    let mut uses: HashMap<&str, Vec<(String, String)>> = HashMap::new();
    let mut arrived: Vec<Arrived> = Vec::new();
    for (name, url) in chains {
        let node = ProviderBuilder::new().connect_http(url.parse()?);
        let confirmed = (node.get_block_number().await? + 1).saturating_sub(confirmations);
        let tokens: Vec<Address> = vec![DEVNET_TOKEN.parse()?, USDC.parse()?];
        let range = Filter::new()
            .address(tokens)
            .from_block(0)
            .to_block(confirmed);
        let used = node
            .get_logs(
                &range
                    .clone()
                    .event_signature(Eip3009::AuthorizationUsed::SIGNATURE_HASH),
            )
            .await?;
        for log in used {
            let (Ok(used), Some(tx)) = (
                Eip3009::AuthorizationUsed::decode_log_data(log.data()),
                log.transaction_hash,
            ) else {
                continue;
            };
            if let Some(order) = by_nonce.get(&used.nonce) {
                uses.entry(order.id.as_str())
                    .or_default()
                    .push((name.clone(), tx.to_string()));
            }
        }
        let on_chain: HashMap<&str, &str> = addresses
            .iter()
            .filter(|(chain, ..)| chain == name)
            .map(|(_, address, order)| (address.as_str(), order.as_str()))
            .collect();
        let words: Vec<B256> = on_chain
            .keys()
            .filter_map(|a| a.parse::<Address>().ok())
            .map(|a| a.into_word())
            .collect();
        for chunk in words.chunks(100) {
            let transfers = node
                .get_logs(
                    &range
                        .clone()
                        .event_signature(Eip3009::Transfer::SIGNATURE_HASH)
                        .topic2(chunk.to_vec()),
                )
                .await?;
            for log in transfers {
                let (Ok(sent), Some(tx), Some(index)) = (
                    Eip3009::Transfer::decode_log_data(log.data()),
                    log.transaction_hash,
                    log.log_index,
                ) else {
                    continue;
                };
                let address = sent.to.to_checksum(None);
                let Some(order) = on_chain.get(address.as_str()) else {
                    continue;
                };
                arrived.push(Arrived {
                    order: order.to_string(),
                    chain: name.clone(),
                    address,
                    token: log.address().to_checksum(None),
                    transaction: tx.to_string(),
                    log_index: index as i32,
                    value: sent.value,
                });
            }
        }
    }

    // One payment per order: at most one nonce use across both chains, and the order reflects it.
    let mut paid_wrong = 0;
    for order in &orders {
        let used = uses.get(order.id.as_str()).map_or(&[][..], Vec::as_slice);
        let submitted = submissions.get(&order.id).copied().unwrap_or(0);
        let consistent = match used {
            [] => {
                order.payment_method.as_deref() != Some("authorization")
                    || order.settled_by.is_none()
            }
            [(chain, tx)] => {
                order.state == "succeeded"
                    && order.settled_by.as_deref() == Some(tx.as_str())
                    && order.chain.as_deref() == Some(chain.as_str())
            }
            _ => false,
        } && submitted <= 1;
        if !consistent {
            eprintln!(
                "checker: order {} ({}, {:?} on {:?}, settled by {:?}): nonce used in {used:?}, {submitted} submission(s)",
                order.id, order.state, order.selected_option, order.chain, order.settled_by
            );
            paid_wrong += 1;
        }
    }

    // Every arrival counted by the chosen option or listed once as a duplicate, each booked.
    let mut listed_wrong = 0;
    for order in &orders {
        let mine: Vec<&Arrived> = arrived.iter().filter(|a| a.order == order.id).collect();
        let counts = |a: &Arrived| {
            order.payment_method.as_deref() == Some("deposit_address")
                && order.deposit_address.as_deref() == Some(a.address.as_str())
                && order.token.as_deref() == Some(a.token.as_str())
                && order.chain.as_deref() == Some(a.chain.as_str())
        };
        let received: U256 = mine
            .iter()
            .filter(|a| counts(a))
            .fold(U256::ZERO, |sum, a| sum + a.value);
        let duplicates: Vec<&Arrived> = mine.iter().copied().filter(|a| !counts(a)).collect();
        let listed = |a: &Arrived| {
            order
                .duplicates
                .iter()
                .filter(|d| {
                    d["transaction_hash"] == a.transaction.as_str()
                        && d["amount"] == a.value.to_string().as_str()
                        && d["deposit_address"] == a.address.as_str()
                })
                .count()
        };
        let unbooked = mine
            .iter()
            .filter(|a| !booked.contains(&(a.chain.clone(), a.transaction.clone(), a.log_index)))
            .count();
        let by_deposit = order
            .duplicates
            .iter()
            .filter(|d| d["deposit_address"].is_string())
            .count();
        let consistent = received.to_string() == order.amount_received
            && duplicates.iter().all(|a| listed(a) == 1)
            && by_deposit == duplicates.len()
            && unbooked == 0;
        if !consistent {
            eprintln!(
                "checker: order {} ({}, {:?}): received {} by the ledger, {received} counted on chain; {} duplicate(s) on chain, {by_deposit} listed; {unbooked} unbooked",
                order.id,
                order.state,
                order.selected_option,
                order.amount_received,
                duplicates.len()
            );
            listed_wrong += 1;
        }
    }

    // Racing confirms: at most one answered 200 per order, and it is the option chosen.
    let mut confirmed: HashMap<&str, Vec<&str>> = HashMap::new();
    for (order, option, status) in &ordered.confirms {
        if *status == 200 {
            confirmed.entry(order).or_default().push(option);
        }
    }
    let raced_wrong = confirmed
        .iter()
        .filter(|(order, options)| {
            let chosen = orders
                .iter()
                .find(|o| o.id == **order)
                .and_then(|o| o.selected_option.as_deref());
            options.len() != 1 || chosen != Some(options[0])
        })
        .count();

    Ok(vec![
        row(
            "each order paid at most once across options and chains",
            orders.len(),
            paid_wrong,
        ),
        row(
            "each order's arrivals counted or listed once as duplicates, booked",
            orders.len(),
            listed_wrong,
        ),
        row(
            "of racing confirms of an order, one answered 200: the option chosen",
            ordered.confirms.len(),
            raced_wrong,
        ),
    ])
}
