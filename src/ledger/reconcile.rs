//! `payments-api reconcile --chain evm:<id>`: the ledger against the chain. Every confirmed
//! transfer that follows the use of one of our nonces and moves what it authorized must be booked
//! once, with its amount; every booked entry must be such a transfer on chain. That holds for
//! both directions money moves here: a payment (an intent's nonce, payer → merchant address) and
//! a refund (a refund's nonce, merchant address → payer). Anything else is a difference.

use std::collections::{BTreeMap, HashMap};

use alloy::{
    primitives::{Address, B256},
    providers::Provider,
    rpc::types::{Filter, Log},
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
    pub refunds_booked: usize,
    pub refunded_on_chain: usize,
    /// Transfers to or from merchant addresses that are no payment or refund of ours (plain
    /// transfers): shown, not differences. Each counted once, even between two merchant addresses.
    pub unrelated_transfers: usize,
    /// Our nonces used by a transfer of another amount than the one authorized: the payer burned
    /// the nonce (its intent or refund failed), and the money moved is no payment of ours. Shown,
    /// not differences: nothing is booked for them, by design.
    pub burned_nonces: Vec<String>,
    pub differences: Vec<String>,
    pub up_to_block: u64,
}

/// A movement, keyed by its transaction and the log index of its `AuthorizationUsed`; its value
/// is the intent or refund it books and the amount.
type Movements = BTreeMap<(String, i64), (String, String)>;

pub async fn reconcile(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    confirmations: u64,
) -> anyhow::Result<Report> {
    let head = node.get_block_number().await?;
    let confirmed = (head + 1).saturating_sub(confirmations);
    let mut report = Report {
        up_to_block: confirmed,
        ..Report::default()
    };
    let mut unrelated = std::collections::BTreeSet::new();
    for kind in [Kind::Payment, Kind::Refund] {
        let booked = booked(conn, chain, kind).await?;
        let on_chain = on_chain(
            conn,
            chain,
            node,
            confirmed,
            kind,
            &mut report,
            &mut unrelated,
        )
        .await?;
        let (verb, noun) = match kind {
            Kind::Payment => {
                report.booked = booked.len();
                report.paid_on_chain = on_chain.len();
                ("paid", "payment")
            }
            Kind::Refund => {
                report.refunds_booked = booked.len();
                report.refunded_on_chain = on_chain.len();
                ("refunded", "refund")
            }
        };
        for (key, (subject, amount)) in &on_chain {
            match booked.get(key) {
                None => report.differences.push(format!(
                    "on chain, not in the ledger: {subject} {verb} {amount} in {} (log {})",
                    key.0, key.1
                )),
                Some((_, booked_amount)) if booked_amount != amount => {
                    report.differences.push(format!(
                        "{subject}: the ledger has {booked_amount}, the chain moved {amount} in {}",
                        key.0
                    ))
                }
                Some(_) => {}
            }
        }
        for (key, (subject, amount)) in &booked {
            if !on_chain.contains_key(key) {
                report.differences.push(format!(
                    "in the ledger, not on chain: {subject} booked {amount} for {} (log {}) as a {noun}",
                    key.0, key.1
                ));
            }
        }
    }
    report.unrelated_transfers = unrelated.len();
    Ok(report)
}

/// The ledger's entries of `kind` on `chain`, by chain event, with what each moved: a payment's
/// amount as its merchant received it, a refund's as its payer did.
async fn booked(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    kind: Kind,
) -> Result<Movements, sqlx::Error> {
    let receiver = match kind {
        Kind::Payment => "merchant:%",
        Kind::Refund => "payer:%",
    };
    Ok(sqlx::query!(
        r#"
        SELECT e.transaction_hash, e.log_index, COALESCE(e.refund_id, e.intent_id) AS "subject!",
               p.amount::text AS "amount!"
          FROM ledger_entries e
          JOIN ledger_postings p ON p.entry_id = e.id AND p.account LIKE $3
         WHERE e.chain = $1 AND e.kind = $2
        "#,
        chain.name,
        kind.as_str(),
        receiver,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| {
        (
            (r.transaction_hash, i64::from(r.log_index)),
            (r.subject, r.amount),
        )
    })
    .collect())
}

/// What one of our nonces authorized: who signs (and pays), who receives, how much.
struct Authorized {
    subject: String,
    from: String,
    to: String,
    amount: String,
}

/// Every movement of `kind` on chain up to `confirmed`, read from the tokens' logs: transfers to
/// (payments) or from (refunds) the merchant addresses intents name, each after a nonce use.
async fn on_chain(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    confirmed: u64,
    kind: Kind,
    report: &mut Report,
    unrelated: &mut std::collections::BTreeSet<(B256, u64)>,
) -> anyhow::Result<Movements> {
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
    let mut moved = BTreeMap::new();
    for (token, merchants) in payees {
        let mut from = 0;
        while from <= confirmed {
            let to_block = (from + BLOCKS_PER_QUERY - 1).min(confirmed);
            let range = Filter::new()
                .address(token)
                .from_block(from)
                .to_block(to_block);
            let transfers = range
                .clone()
                .event_signature(Eip3009::Transfer::SIGNATURE_HASH);
            let transfers = match kind {
                Kind::Payment => transfers.topic2(merchants.clone()),
                Kind::Refund => transfers.topic1(merchants.clone()),
            };
            let transfers = node.get_logs(&transfers).await?;
            let uses = node
                .get_logs(&range.event_signature(Eip3009::AuthorizationUsed::SIGNATURE_HASH))
                .await?;
            for transfer in &transfers {
                let (Some(tx), Some(index)) = (transfer.transaction_hash, transfer.log_index)
                else {
                    continue;
                };
                let Ok(sent) = Eip3009::Transfer::decode_log_data(transfer.data()) else {
                    continue;
                };
                let Some((use_index, authorized)) =
                    authorized_before(conn, chain, token, kind, &uses, tx, index).await?
                else {
                    unrelated.insert((tx, index));
                    continue;
                };
                if authorized.from != sent.from.to_checksum(None)
                    || authorized.to != sent.to.to_checksum(None)
                {
                    unrelated.insert((tx, index));
                    continue;
                }
                // A transfer of another amount burns the nonce: it moves nothing of ours.
                if sent.value.to_string() == authorized.amount {
                    moved.insert(
                        (tx.to_string(), use_index as i64),
                        (authorized.subject, authorized.amount),
                    );
                } else {
                    report.burned_nonces.push(format!(
                        "{}'s nonce used in {tx} by a transfer of {}, not its {}",
                        authorized.subject, sent.value, authorized.amount
                    ));
                }
            }
            from = to_block + 1;
        }
    }
    Ok(moved)
}

/// The nonce use a transfer follows (the last one before it in its transaction) and what our
/// authorization of `kind` with that nonce allowed, if the nonce is ours and its signer used it.
async fn authorized_before(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    token: Address,
    kind: Kind,
    uses: &[Log],
    tx: B256,
    index: u64,
) -> Result<Option<(u64, Authorized)>, sqlx::Error> {
    let used = uses
        .iter()
        .filter(|u| u.transaction_hash == Some(tx) && u.log_index.is_some_and(|i| i < index))
        .max_by_key(|u| u.log_index)
        .and_then(|u| {
            Some((
                u.log_index?,
                Eip3009::AuthorizationUsed::decode_log_data(u.data()).ok()?,
            ))
        });
    let Some((use_index, used)) = used else {
        return Ok(None);
    };
    let (nonce, token) = (used.nonce.as_slice(), token.to_checksum(None));
    let authorized =
        match kind {
            Kind::Payment => sqlx::query_as!(
                Authorized,
                r#"SELECT id AS subject, payer AS "from", payee AS "to", amount::text AS "amount!"
                 FROM payment_intents WHERE chain_nonce = $1 AND chain = $2 AND token = $3 AND payer = $4"#,
                nonce,
                chain.name,
                token,
                used.authorizer.to_checksum(None),
            )
            .fetch_optional(conn)
            .await?,
            Kind::Refund => sqlx::query_as!(
                Authorized,
                r#"SELECT id AS subject, payee AS "from", payer AS "to", amount::text AS "amount!"
                 FROM refunds WHERE chain_nonce = $1 AND chain = $2 AND token = $3"#,
                nonce,
                chain.name,
                token,
            )
            .fetch_optional(conn)
            .await?,
        };
    Ok(authorized
        .filter(|a| a.from == used.authorizer.to_checksum(None))
        .map(|a| (use_index, a)))
}
