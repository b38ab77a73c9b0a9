//! `payments-api reconcile --chain evm:<id>`: the ledger against the chain, an operator's command
//! above the ways to pay, reading each table through its owner. Every confirmed
//! transfer that follows the use of one of our nonces and moves what it authorized must be booked
//! once, with its amount; every booked entry must be such a transfer on chain. That holds for
//! both directions money moves here: a payment (an intent's nonce, payer → merchant address) and
//! a refund (a refund's nonce, merchant address → payer). Anything else is a difference.

use std::collections::{BTreeMap, HashMap};

use alloy::{
    primitives::{Address, B256, U256},
    providers::Provider,
    rpc::types::{Filter, Log},
    sol_types::SolEvent,
};
use sqlx::PgConnection;

use crate::{
    config::{ChainEndpoint, Finality},
    intents,
    ledger::{self, Kind},
    rails::{
        evm::{
            permit2,
            token::{Eip712Token, Eip3009},
        },
        finality,
        rpc::Node,
    },
    ways_to_pay::refunds,
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
    /// Confirmed transfers into and out of deposit addresses booked (deposits and sweeps), and
    /// seen on chain.
    pub deposit_transfers_booked: usize,
    pub deposit_transfers_on_chain: usize,
    pub differences: Vec<String>,
    pub up_to_block: u64,
}

/// The movements that follow the use of one of our nonces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signed {
    /// An intent's nonce: payer to merchant address.
    Payment,
    /// A refund's nonce: merchant address to payer.
    Refund,
}

impl Signed {
    fn booked_as(self) -> Kind {
        match self {
            Self::Payment => Kind::Payment,
            Self::Refund => Kind::Refund,
        }
    }
}

/// A movement, keyed by its transaction and the log index of its `AuthorizationUsed`; its value
/// is the intent or refund it books and the amount.
type Movements = BTreeMap<(String, i64), (String, String)>;

pub async fn reconcile(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    finality: Finality,
) -> anyhow::Result<Report> {
    let head = node.get_block_number().await?;
    let confirmed = finality::done_up_to(finality, node, head)
        .await?
        .unwrap_or(0);
    let mut report = Report {
        up_to_block: confirmed,
        ..Report::default()
    };
    let mut unrelated = std::collections::BTreeSet::new();
    for kind in [Signed::Payment, Signed::Refund] {
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
            Signed::Payment => {
                report.booked = booked.len();
                report.paid_on_chain = on_chain.len();
                ("paid", "payment")
            }
            Signed::Refund => {
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
    deposits(conn, chain, node, confirmed, &mut report).await?;
    Ok(report)
}

/// Deposit addresses per query's topic list, within what nodes accept.
const ADDRESSES_PER_QUERY: usize = 100;

/// Deposit addresses against the chain (`docs/settlement.md`, "Deposit addresses"): every
/// confirmed `Transfer` into one (a deposit) or out of one (a sweep) must be booked once on the
/// address's account with its amount, every such posting must be a transfer on chain, and each
/// address's account must hold what its balance on chain is, so every swept amount left for the
/// merchant.
async fn deposits(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    confirmed: u64,
    report: &mut Report,
) -> anyhow::Result<()> {
    let addresses: Vec<Address> = intents::repo::deposit_addresses_on(conn, &chain.name)
        .await?
        .iter()
        .filter_map(|a| a.parse().ok())
        .collect();
    if addresses.is_empty() {
        return Ok(());
    }
    // Every contract's transfers, not only the tokens the follower reads: money in any token
    // that reached a deposit address must be booked.
    // (transaction, log index) → (deposit address, token, signed amount on its account).
    let mut on_chain: BTreeMap<(String, i64), (String, String, String)> = BTreeMap::new();
    for chunk in addresses.chunks(ADDRESSES_PER_QUERY) {
        let words: Vec<B256> = chunk.iter().map(|a| a.into_word()).collect();
        let mut from = 0;
        while from <= confirmed {
            let to_block = (from + BLOCKS_PER_QUERY - 1).min(confirmed);
            let range = Filter::new()
                .event_signature(Eip3009::Transfer::SIGNATURE_HASH)
                .from_block(from)
                .to_block(to_block);
            for (filter, sign) in [
                (range.clone().topic2(words.clone()), ""),
                (range.topic1(words.clone()), "-"),
            ] {
                for log in node.get_logs(&filter).await? {
                    let (Some(tx), Some(index)) = (log.transaction_hash, log.log_index) else {
                        continue;
                    };
                    // An ERC-721 `Transfer` has the same topic 0 and its id as a fourth topic.
                    let Ok(sent) = Eip3009::Transfer::decode_log_data(log.data()) else {
                        continue;
                    };
                    let address = if sign.is_empty() { sent.to } else { sent.from };
                    on_chain.insert(
                        (tx.to_string(), index as i64),
                        (
                            address.to_checksum(None),
                            log.address().to_checksum(None),
                            format!("{sign}{}", sent.value),
                        ),
                    );
                }
            }
            from = to_block + 1;
        }
    }
    let booked: BTreeMap<(String, i64), (String, String, String)> =
        ledger::deposit_postings(conn, &chain.name)
            .await?
            .into_iter()
            .map(|p| {
                let address = p.account.trim_start_matches("deposit:").to_owned();
                (
                    (p.transaction_hash, i64::from(p.log_index)),
                    (address, p.token, p.amount),
                )
            })
            .collect();
    report.deposit_transfers_booked = booked.len();
    report.deposit_transfers_on_chain = on_chain.len();
    for (key, moved) in &on_chain {
        match booked.get(key) {
            Some(entry) if entry == moved => {}
            Some((_, _, amount)) => report.differences.push(format!(
                "deposit address {}: the ledger has {amount}, the chain moved {} in {}",
                moved.0, moved.2, key.0
            )),
            None => report.differences.push(format!(
                "on chain, not in the ledger: {} of {} on deposit address {} in {} (log {})",
                moved.2, moved.1, moved.0, key.0, key.1
            )),
        }
    }
    for (key, (address, token, amount)) in &booked {
        if !on_chain.contains_key(key) {
            report.differences.push(format!(
                "in the ledger, not on chain: {amount} of {token} on deposit address {address} in {} (log {})",
                key.0, key.1
            ));
        }
    }
    // What each address holds by the ledger is what it holds on chain at the confirmed block.
    // (into, out of) each address, per token: the ledger's postings in whatever order they come.
    let mut moved: BTreeMap<(String, String), (U256, U256)> = BTreeMap::new();
    for (address, token, amount) in booked.values() {
        let entry = moved.entry((address.clone(), token.clone())).or_default();
        match amount.strip_prefix('-') {
            Some(out) => entry.1 = entry.1.saturating_add(out.parse().unwrap_or_default()),
            None => entry.0 = entry.0.saturating_add(amount.parse().unwrap_or_default()),
        }
    }
    for ((address, token), (into, out)) in moved {
        let Some(by_ledger) = into.checked_sub(out) else {
            report.differences.push(format!(
                "deposit address {address}: the ledger has {out} of {token} leaving it, more than the {into} it received"
            ));
            continue;
        };
        let (Ok(holder), Ok(contract)) = (address.parse::<Address>(), token.parse::<Address>())
        else {
            continue;
        };
        let balance = Eip712Token::new(contract, node)
            .balanceOf(holder)
            .block(confirmed.into())
            .call()
            .await?;
        if balance != by_ledger {
            report.differences.push(format!(
                "deposit address {address} holds {balance} of {token} on chain, the ledger says {by_ledger}"
            ));
        }
    }
    Ok(())
}

/// The ledger's entries of `kind` on `chain`, by chain event, with what each moved: a payment's
/// amount as its merchant received it, a refund's as its payer did.
async fn booked(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    kind: Signed,
) -> Result<Movements, sqlx::Error> {
    let receiver = match kind {
        Signed::Payment => "merchant:%",
        Signed::Refund => "payer:%",
    };
    Ok(
        ledger::received(conn, &chain.name, kind.booked_as(), receiver)
            .await?
            .into_iter()
            .map(|r| {
                (
                    (r.transaction_hash, i64::from(r.log_index)),
                    (r.subject, r.amount),
                )
            })
            .collect(),
    )
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
    kind: Signed,
    report: &mut Report,
    unrelated: &mut std::collections::BTreeSet<(B256, u64)>,
) -> anyhow::Result<Movements> {
    let pairs = intents::repo::payees_on(conn, &chain.name).await?;
    let mut payees: HashMap<Address, Vec<B256>> = HashMap::new();
    for (token, payee) in pairs {
        let (Ok(token), Ok(payee)) = (token.parse::<Address>(), payee.parse::<Address>()) else {
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
                Signed::Payment => transfers.topic2(merchants.clone()),
                Signed::Refund => transfers.topic1(merchants.clone()),
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
    match kind {
        Signed::Payment => {
            permit2_payments(conn, chain, node, confirmed, &mut moved, unrelated).await?
        }
        Signed::Refund => transfer_refunds(conn, chain, node, confirmed, &mut moved).await?,
    }
    Ok(moved)
}

/// Payments by Permit2 (`docs/x402.md`, "Permit2"): each paid intent's transaction must hold one
/// of x402's proxies' `Settled()` (or `SettledWithPermit()`) right after a `Transfer` of its amount
/// of its token from its payer to its payee. Booked under that log, as the watch saw it.
async fn permit2_payments(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    confirmed: u64,
    moved: &mut Movements,
    unrelated: &mut std::collections::BTreeSet<(B256, u64)>,
) -> anyhow::Result<()> {
    let settled_topics = permit2::settled_topics();
    for intent in intents::repo::settled_permits_on(conn, &chain.name).await? {
        let settlement = &intent.settlement.0;
        if settlement.block_number > confirmed {
            continue;
        }
        let Ok(hash) = settlement.transaction_hash.parse::<B256>() else {
            continue;
        };
        let Some(receipt) = node.get_transaction_receipt(hash).await? else {
            continue;
        };
        let mut last_transfer = None;
        for log in receipt.inner.logs() {
            let Some(index) = log.log_index else { continue };
            if [permit2::X402_EXACT_PROXY, permit2::X402_UPTO_PROXY].contains(&log.address())
                && log
                    .topics()
                    .first()
                    .is_some_and(|t| settled_topics.contains(t))
            {
                if let Some((transfer_index, sent)) = last_transfer.take()
                    && sent
                        == (
                            intent.payer.clone(),
                            intent.payee.clone(),
                            intent.amount.clone(),
                        )
                {
                    unrelated.remove(&(hash, transfer_index));
                    moved.insert(
                        (settlement.transaction_hash.clone(), index as i64),
                        (intent.id.clone(), intent.amount.clone()),
                    );
                }
                continue;
            }
            if log.address().to_checksum(None) != intent.token {
                continue;
            }
            if let Ok(sent) = Eip3009::Transfer::decode_log_data(log.data()) {
                last_transfer = Some((
                    index,
                    (
                        sent.from.to_checksum(None),
                        sent.to.to_checksum(None),
                        sent.value.to_string(),
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Refunds by transfer (`docs/refunds.md`): each succeeded one's transaction must hold a
/// `Transfer` of its amount of its token from the merchant's address to its payer.
async fn transfer_refunds(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    node: &Node,
    confirmed: u64,
    moved: &mut Movements,
) -> anyhow::Result<()> {
    for refund in refunds::repo::settled_transfers_on(conn, &chain.name).await? {
        let settlement = &refund.settlement.0;
        if settlement.block_number > confirmed {
            continue;
        }
        let Ok(hash) = settlement.transaction_hash.parse::<B256>() else {
            continue;
        };
        let Some(receipt) = node.get_transaction_receipt(hash).await? else {
            continue;
        };
        for log in receipt.inner.logs() {
            let Some(index) = log.log_index else { continue };
            let Ok(sent) = Eip3009::Transfer::decode_log_data(log.data()) else {
                continue;
            };
            if log.address().to_checksum(None) == refund.token
                && sent.from.to_checksum(None) == refund.payee
                && sent.to.to_checksum(None) == refund.payer
                && sent.value.to_string() == refund.amount
            {
                moved.insert(
                    (settlement.transaction_hash.clone(), index as i64),
                    (refund.id.clone(), refund.amount.clone()),
                );
            }
        }
    }
    Ok(())
}

/// The nonce use a transfer follows (the last one before it in its transaction) and what our
/// authorization of `kind` with that nonce allowed, if the nonce is ours and its signer used it.
async fn authorized_before(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
    token: Address,
    kind: Signed,
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
    let authorized = match kind {
        Signed::Payment => intents::repo::by_chain_nonce(
            conn,
            &chain.name,
            &token,
            &used.authorizer.to_checksum(None),
            nonce,
            intents::repo::NonceSpace::Eip3009,
        )
        .await?
        .map(|intent| Authorized {
            subject: intent.id,
            from: intent.payer.unwrap_or_default(),
            to: intent.payee,
            amount: intent.amount,
        }),
        Signed::Refund => refunds::repo::by_chain_nonce(conn, &chain.name, &token, nonce)
            .await?
            .map(|refund| Authorized {
                subject: refund.id,
                from: refund.payee,
                to: refund.payer,
                amount: refund.amount,
            }),
    };
    Ok(authorized
        .filter(|a| a.from == used.authorizer.to_checksum(None))
        .map(|a| (use_index, a)))
}
