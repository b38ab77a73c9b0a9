//! `payments-api reconcile --chain evm:<id>`: the ledger against the chain. Every confirmed
//! transfer of an intent's token to an intent's merchant address that follows the use of an
//! intent's nonce (an intent payment, as the payment watch reads it) must be booked once, with its
//! amount; every booked payment must be such a transfer on chain. Anything else is a difference.

use std::collections::{BTreeMap, HashMap};

use alloy::{
    primitives::{Address, B256},
    providers::Provider,
    rpc::types::Filter,
    sol_types::SolEvent,
};
use sqlx::PgConnection;

use super::Kind;

use crate::{
    chain::{rpc::Node, token::Eip3009},
    config::ChainEndpoint,
};

/// Blocks asked for per `eth_getLogs`, within what public nodes accept.
const BLOCKS_PER_QUERY: u64 = 10_000;

#[derive(Debug, Default)]
pub struct Report {
    pub booked: usize,
    pub paid_on_chain: usize,
    /// Transfers to merchant addresses that pay no intent (plain transfers): shown, not differences.
    pub unrelated_transfers: usize,
    pub differences: Vec<String>,
    pub up_to_block: u64,
}

/// A payment, keyed by its transaction and the log index of its `AuthorizationUsed`.
type PaymentKey = (String, i64);

pub async fn reconcile(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    confirmations: u64,
) -> anyhow::Result<Report> {
    let booked: BTreeMap<PaymentKey, (String, String)> = sqlx::query!(
        r#"
        SELECT e.transaction_hash, e.log_index, e.intent_id, p.amount::text AS "amount!"
          FROM ledger_entries e
          JOIN ledger_postings p ON p.entry_id = e.id AND p.account LIKE 'merchant:%'
         WHERE e.chain = $1 AND e.kind = $2
        "#,
        chain.name,
        Kind::Payment.as_str(),
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| {
        (
            (r.transaction_hash, i64::from(r.log_index)),
            (r.intent_id, r.amount),
        )
    })
    .collect();
    let head = node.get_block_number().await?;
    let confirmed = (head + 1).saturating_sub(confirmations);
    let mut report = Report {
        booked: booked.len(),
        up_to_block: confirmed,
        ..Report::default()
    };
    let on_chain = paid_on_chain(conn, chain, node, confirmed, &mut report).await?;
    report.paid_on_chain = on_chain.len();
    for (key, (intent, amount)) in &on_chain {
        match booked.get(key) {
            None => report.differences.push(format!(
                "on chain, not in the ledger: {intent} paid {amount} in {} (log {})",
                key.0, key.1
            )),
            Some((_, booked_amount)) if booked_amount != amount => {
                report.differences.push(format!(
                    "{intent}: the ledger has {booked_amount}, the chain moved {amount} in {}",
                    key.0
                ))
            }
            Some(_) => {}
        }
    }
    for (key, (intent, amount)) in &booked {
        if !on_chain.contains_key(key) {
            report.differences.push(format!(
                "in the ledger, not on chain: {intent} booked {amount} for {} (log {})",
                key.0, key.1
            ));
        }
    }
    Ok(report)
}

/// Every intent payment on chain up to `confirmed`, read from the tokens' logs.
async fn paid_on_chain(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    confirmed: u64,
    report: &mut Report,
) -> anyhow::Result<BTreeMap<PaymentKey, (String, String)>> {
    let pairs = sqlx::query!(
        "SELECT DISTINCT token, payee FROM payment_intents WHERE chain = $1",
        chain.name
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut payees: HashMap<Address, Vec<B256>> = HashMap::new();
    for pair in pairs {
        let (Ok(token), Ok(payee)) = (pair.token.parse::<Address>(), pair.payee.parse::<Address>())
        else {
            continue;
        };
        payees.entry(token).or_default().push(payee.into_word());
    }
    let mut paid = BTreeMap::new();
    for (token, to) in payees {
        let mut from = 0;
        while from <= confirmed {
            let to_block = (from + BLOCKS_PER_QUERY - 1).min(confirmed);
            let range = Filter::new()
                .address(token)
                .from_block(from)
                .to_block(to_block);
            let transfers = node
                .get_logs(
                    &range
                        .clone()
                        .event_signature(Eip3009::Transfer::SIGNATURE_HASH)
                        .topic2(to.clone()),
                )
                .await?;
            let uses = node
                .get_logs(&range.event_signature(Eip3009::AuthorizationUsed::SIGNATURE_HASH))
                .await?;
            for transfer in &transfers {
                let (Some(tx), Some(index)) = (transfer.transaction_hash, transfer.log_index)
                else {
                    continue;
                };
                let Ok(moved) = Eip3009::Transfer::decode_log_data(transfer.data()) else {
                    continue;
                };
                // The nonce use this transfer follows: the last one before it in its transaction.
                let used = uses
                    .iter()
                    .filter(|u| {
                        u.transaction_hash == Some(tx) && u.log_index.is_some_and(|i| i < index)
                    })
                    .max_by_key(|u| u.log_index)
                    .and_then(|u| {
                        Some((
                            u.log_index?,
                            Eip3009::AuthorizationUsed::decode_log_data(u.data()).ok()?,
                        ))
                    });
                let intent = match &used {
                    Some((_, used)) => sqlx::query!(
                        r#"SELECT id, payer, payee, amount::text AS "amount!" FROM payment_intents
                            WHERE chain_nonce = $1 AND chain = $2 AND token = $3"#,
                        used.nonce.as_slice(),
                        chain.name,
                        token.to_checksum(None),
                    )
                    .fetch_optional(&mut *conn)
                    .await?
                    .filter(|i| i.payer == used.authorizer.to_checksum(None)),
                    None => None,
                };
                match (intent, used) {
                    (Some(intent), Some((use_index, _)))
                        if intent.payer == moved.from.to_checksum(None)
                            && intent.payee == moved.to.to_checksum(None) =>
                    {
                        // A transfer of another amount burns the nonce: it pays nothing.
                        if moved.value.to_string() == intent.amount {
                            paid.insert(
                                (tx.to_string(), use_index as i64),
                                (intent.id, intent.amount),
                            );
                        }
                    }
                    _ => report.unrelated_transfers += 1,
                }
            }
            from = to_block + 1;
        }
    }
    Ok(paid)
}
