//! The deposit watch: what the chain follower looks for on behalf of deposit addresses, and what a
//! confirmed log changes (`docs/settlement.md`, "Deposit addresses"). It wants the `Transfer`s of
//! the tokens deposit intents were made for; one to a deposit address is a deposit, one from it a
//! sweep. The match is one indexed lookup in PostgreSQL, however many intents are open.
//!
//! A confirmed deposit is booked (payer → deposit address) and swept, whatever the intent can
//! still do; one of the intent's own token adds to `amount_received` and moves the intent by
//! `state::deposit_action`. A confirmed sweep is booked (deposit address → merchant).

use std::collections::HashMap;

use alloy::{primitives::Address, rpc::types::Log, sol_types::SolEvent};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use time::OffsetDateTime;

use super::sweep::{self, Sweep};
use crate::{
    config::ChainEndpoint,
    intents::{
        order::{DuplicatePayment, DuplicateReason},
        repo::{self, Change, Seen, Settlement, TransitionError},
        state::{self, Action, Actor, IntentState},
    },
    ledger,
    rails::{
        evm::token::Eip3009,
        follower::{
            FollowError, Interest, Observation, ObservationKind, Observed, Outcome, SentTo, Watch,
            WatchError,
        },
        rpc::Node,
    },
};

/// What the deposit watch records of a transfer at a deposit address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepositKind {
    /// A transfer to an intent's deposit address.
    Received,
    /// A transfer out of an intent's deposit address: its sweep.
    Swept,
}

impl ObservationKind for DepositKind {
    const ALL: &'static [Self] = &[Self::Received, Self::Swept];

    fn as_str(self) -> &'static str {
        match self {
            Self::Received => "deposit_received",
            Self::Swept => "deposit_swept",
        }
    }
}

/// What a confirmed transfer at a deposit address did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepositOutcome {
    Swept,
    /// Another token than the intent's: booked and swept, not counted.
    OtherToken,
    /// At an order's option's address after another option was chosen, or the order left
    /// `created` unchosen: booked and swept, not counted, listed on the order.
    DuplicatePayment,
    Succeeded,
    PartiallyPaid,
    Overpaid,
    PaidAfterExpiry,
    PaidAfterCancel,
    /// Counted toward an intent that cannot move.
    Ignored,
}

impl Outcome for DepositOutcome {
    fn label(&self) -> &'static str {
        match self {
            Self::Swept => "deposit_swept",
            Self::OtherToken => "deposit_other_token",
            Self::DuplicatePayment => "duplicate_payment",
            Self::Succeeded => "succeeded",
            Self::PartiallyPaid => "partially_paid",
            Self::Overpaid => "overpaid",
            Self::PaidAfterExpiry => "paid_after_expiry",
            Self::PaidAfterCancel => "paid_after_cancel",
            Self::Ignored => "ignored",
        }
    }
}

/// What an observation of a deposit address's transfer holds; its subject is the intent's id.
#[derive(Debug, Serialize, Deserialize)]
struct DepositTransfer {
    merchant_id: String,
    intent_id: String,
    deposit_address: String,
    /// The merchant's payee address, where a sweep sends.
    payee: String,
    /// The token moved, which may be another than the intent's.
    token: String,
    /// The token the address was made for: the intent's, or its option's.
    intent_token: String,
    /// The order's option whose address it is.
    #[serde(default)]
    option_id: Option<String>,
    from: String,
    to: String,
    value: String,
}

impl DepositTransfer {
    /// Whether it counts toward paying its intent: the intent's token, arriving.
    fn counts(&self) -> bool {
        self.token == self.intent_token
    }
}

/// How long after it is made a deposit address's transfers of any token are read, not only of the
/// tokens deposit intents were made for (one `eth_getLogs` per hundred addresses and range); a token
/// first seen there is read from then on. `reconcile` reads every address for every token.
const ANY_TOKEN_READ_FOR: time::Duration = time::Duration::days(7);

#[derive(Debug, Clone, Copy)]
pub struct DepositWatch {
    /// Basis points of its amount an intent may fall short by and still succeed.
    pub underpayment_tolerance_bps: u32,
}

impl Watch for DepositWatch {
    type Outcome = DepositOutcome;

    fn applies(&self, kind: &str) -> bool {
        DepositKind::parse(kind).is_some()
    }

    async fn interest(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
    ) -> Result<Interest, sqlx::Error> {
        let tokens = repo::deposit_tokens_on(conn, &chain.name).await?;
        if tokens.is_empty() {
            return Ok(Interest::default());
        }
        let since = OffsetDateTime::now_utc() - ANY_TOKEN_READ_FOR;
        let recent = repo::deposit_addresses_made_since(conn, &chain.name, since).await?;
        Ok(Interest {
            addresses: tokens.iter().filter_map(|t| t.parse().ok()).collect(),
            events: vec![Eip3009::Transfer::SIGNATURE_HASH],
            sent_to: vec![SentTo {
                event: Eip3009::Transfer::SIGNATURE_HASH,
                recipients: recent.iter().filter_map(|a| a.parse().ok()).collect(),
            }],
        })
    }

    async fn observe(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        node: &Node,
        log: &Log,
    ) -> Result<Option<Observed>, FollowError> {
        let mut seen = self
            .observe_all(conn, chain, node, std::slice::from_ref(log))
            .await?;
        Ok(seen.pop().flatten())
    }

    /// Every transfer's two ends against the deposit addresses, in one indexed lookup.
    async fn observe_all(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        _node: &Node,
        logs: &[Log],
    ) -> Result<Vec<Option<Observed>>, FollowError> {
        let transfers: Vec<Option<(String, String, String)>> = logs
            .iter()
            .map(|log| {
                Eip3009::Transfer::decode_log_data(log.data())
                    .ok()
                    .map(|t| {
                        (
                            t.from.to_checksum(None),
                            t.to.to_checksum(None),
                            t.value.to_string(),
                        )
                    })
            })
            .collect();
        let ends: Vec<String> = transfers
            .iter()
            .flatten()
            .flat_map(|(from, to, _)| [from.clone(), to.clone()])
            .collect();
        if ends.is_empty() {
            return Ok(vec![None; logs.len()]);
        }
        let intents: HashMap<String, _> = repo::by_deposit_addresses(conn, &chain.name, &ends)
            .await?
            .into_iter()
            .map(|row| (row.deposit_address.clone(), row))
            .collect();
        let mut observed = Vec::with_capacity(logs.len());
        for (log, transfer) in logs.iter().zip(transfers) {
            let Some((from, to, value)) = transfer else {
                observed.push(None);
                continue;
            };
            let (kind, intent) = match (intents.get(&to), intents.get(&from)) {
                (Some(intent), _) => (DepositKind::Received, intent),
                (None, Some(intent)) => (DepositKind::Swept, intent),
                (None, None) => {
                    observed.push(None);
                    continue;
                }
            };
            let payload = DepositTransfer {
                merchant_id: intent.merchant_id.clone(),
                intent_id: intent.id.clone(),
                deposit_address: intent.deposit_address.clone(),
                payee: intent.payee.clone(),
                token: log.address().to_checksum(None),
                intent_token: intent.token.clone(),
                option_id: intent.option_id.clone(),
                from,
                to,
                value,
            };
            observed.push(Some(Observed::new(kind, intent.id.clone(), &payload)?));
        }
        Ok(observed)
    }

    async fn apply(
        &self,
        tx: &mut PgConnection,
        chain: &ChainEndpoint,
        o: &Observation,
    ) -> Result<DepositOutcome, WatchError> {
        let (kind, transfer): (DepositKind, DepositTransfer) = o.read()?;
        let event = ledger::ChainEvent {
            chain: &chain.name,
            transaction_hash: &o.transaction_hash,
            log_index: o.log_index,
        };
        if kind == DepositKind::Swept {
            let entry = ledger::Entry::sweep(
                &transfer.merchant_id,
                &transfer.intent_id,
                &transfer.deposit_address,
                &transfer.to,
                transfer.to == transfer.payee,
                event,
                &transfer.token,
                &transfer.value,
            );
            ledger::post(tx, &entry).await?;
            tracing::info!(chain = %chain.name, intent = %transfer.intent_id, token = %transfer.token, value = %transfer.value, tx = %o.transaction_hash, "deposit address swept");
            return Ok(DepositOutcome::Swept);
        }
        let entry = ledger::Entry::deposit(
            &transfer.merchant_id,
            &transfer.intent_id,
            &transfer.from,
            &transfer.deposit_address,
            event,
            &transfer.token,
            &transfer.value,
        );
        ledger::post(tx, &entry).await?;
        let address = |raw: &str| {
            raw.parse::<Address>()
                .map_err(|e| WatchError::unreadable(format!("stored address {raw}: {e}")))
        };
        let queued = sweep::queue(
            tx,
            chain,
            &Sweep {
                intent_id: &transfer.intent_id,
                merchant: address(&transfer.payee)?,
                intent_token: address(&transfer.intent_token)?,
                deposit_address: address(&transfer.deposit_address)?,
                token: address(&transfer.token)?,
                after: (&o.transaction_hash, o.log_index),
            },
        )
        .await?;
        if queued.is_none() {
            tracing::warn!(chain = %chain.name, intent = %transfer.intent_id, "a deposit arrived on a chain without DEPOSIT_FACTORIES: it stays at its address, which only its merchant can be paid from");
        }
        if !transfer.counts() {
            tracing::warn!(chain = %chain.name, intent = %transfer.intent_id, token = %transfer.token, "another token than the intent's reached its deposit address: booked, swept and listed, not counted");
            repo::watch_deposit_token(tx, &chain.name, &transfer.token).await?;
            record_duplicate(tx, chain, &transfer, o, DuplicateReason::UnacceptedToken).await?;
            return Ok(DepositOutcome::OtherToken);
        }
        if let Some(option_id) = &transfer.option_id
            && !chooses(tx, &transfer, option_id).await?
        {
            tracing::warn!(chain = %chain.name, intent = %transfer.intent_id, option = %option_id, "a deposit reached the address of an order's option after it was paid another way: booked, swept and listed as a duplicate payment");
            record_duplicate(tx, chain, &transfer, o, DuplicateReason::PaidOtherwise).await?;
            return Ok(DepositOutcome::DuplicatePayment);
        }
        self.count(tx, &transfer, o).await
    }
}

/// Lists the transfer on its intent as money not counted toward it, for `reason`.
async fn record_duplicate(
    tx: &mut PgConnection,
    chain: &ChainEndpoint,
    transfer: &DepositTransfer,
    o: &Observation,
    reason: DuplicateReason,
) -> Result<(), WatchError> {
    let duplicate = DuplicatePayment {
        id: DuplicatePayment::new_id(),
        chain: chain.name.clone(),
        token: transfer.token.clone(),
        amount: transfer.value.clone(),
        transaction_hash: o.transaction_hash.clone(),
        from: transfer.from.clone(),
        deposit_address: Some(transfer.deposit_address.clone()),
        reason,
    };
    match repo::record_duplicate(tx, &transfer.merchant_id, &transfer.intent_id, &duplicate).await {
        Ok(_) => Ok(()),
        Err(TransitionError::Database(e)) => Err(e.into()),
        Err(e) => Err(WatchError::Unexpected(e.to_string())),
    }
}

/// What transfers of `token` to an intent's deposit address bring that were seen and are not yet
/// confirmed (token base units), and how many confirmations the oldest of them has.
pub struct Confirming {
    pub amount: String,
    pub confirmations: Option<i64>,
}

/// The deposits of `token` on their way to counting toward the intent `intent_id`.
pub async fn confirming(
    conn: &mut PgConnection,
    intent_id: &str,
    token: &str,
    chain_id: u64,
) -> Result<Confirming, sqlx::Error> {
    sqlx::query_as!(
        Confirming,
        r#"SELECT COALESCE(sum((o.payload->>'value')::numeric), 0)::text AS "amount!",
                  (SELECT c.block_number FROM chain_cursors c WHERE c.chain_id = $3) - min(o.block_number) + 1 AS confirmations
             FROM chain_observations o
            WHERE o.kind = $4 AND o.subject = $1 AND o.applied_at IS NULL
              AND o.payload->>'token' = $2"#,
        intent_id,
        token,
        chain_id as i64,
        DepositKind::Received.as_str(),
    )
    .fetch_one(conn)
    .await
}

/// Whether a deposit at the address of the order's option `option_id` pays through it: it is
/// chosen now (the first deposit at any option's address chooses it) or was before.
async fn chooses(
    tx: &mut PgConnection,
    transfer: &DepositTransfer,
    option_id: &str,
) -> Result<bool, WatchError> {
    let option = repo::option_of(tx, &transfer.merchant_id, &transfer.intent_id, option_id)
        .await?
        .ok_or_else(|| {
            WatchError::unreadable(format!(
                "payment intent {} has no option {option_id}",
                transfer.intent_id
            ))
        })?;
    let choice = repo::choose_option(
        tx,
        &transfer.merchant_id,
        &transfer.intent_id,
        &option,
        None,
    )
    .await?;
    Ok(choice == repo::Choice::Chosen)
}

impl DepositWatch {
    /// Adds a deposit of the intent's token to what it received and moves the intent: an open
    /// intent whose time ran out by the deposit's block expires first, so a late deposit never
    /// pays it.
    async fn count(
        &self,
        tx: &mut PgConnection,
        transfer: &DepositTransfer,
        o: &Observation,
    ) -> Result<DepositOutcome, WatchError> {
        let paid = Settlement::observed(o)?;
        // Counted by the intents' rule of paying, judged by the deposit's own block.
        let intent = repo::count_deposit(
            tx,
            &transfer.merchant_id,
            &transfer.intent_id,
            &transfer.value,
            o.block_timestamp,
            self.underpayment_tolerance_bps,
        )
        .await?;
        // The row is locked: the intent is as read, and moves from there.
        let mut seen = Seen {
            state: intent.state,
            version: intent.version,
        };
        let mut reason = intent.cancellation_reason;
        if intent.late {
            match self
                .transition(tx, transfer, seen, Action::Expire, None)
                .await?
            {
                Some(expired) => {
                    seen = Seen {
                        state: expired.state,
                        version: expired.version,
                    };
                    reason = expired.cancellation_reason;
                }
                None => return Ok(DepositOutcome::Ignored),
            }
        }
        let state = seen.state;
        let action = state::deposit_action(state, reason.as_deref(), intent.reaches);
        let settlement = (action == Action::Settle).then_some(&paid);
        Ok(
            match self
                .transition(tx, transfer, seen, action, settlement)
                .await?
            {
                Some(_) if action == Action::Settle => DepositOutcome::Succeeded,
                Some(_) => match action {
                    Action::DepositAfterExpiry => DepositOutcome::PaidAfterExpiry,
                    _ if state == IntentState::Created => DepositOutcome::PartiallyPaid,
                    _ if state == IntentState::Succeeded => DepositOutcome::Overpaid,
                    _ => DepositOutcome::PaidAfterCancel,
                },
                None => DepositOutcome::Ignored,
            },
        )
    }

    /// `action` on the intent by the chain; `None` if the machine does not allow it (logged).
    async fn transition(
        &self,
        tx: &mut PgConnection,
        transfer: &DepositTransfer,
        seen: Seen,
        action: Action,
        settlement: Option<&Settlement>,
    ) -> Result<Option<repo::PaymentIntent>, WatchError> {
        let change = Change {
            action,
            actor: &Actor::Chain,
            settlement,
            pending_reason: None,
        };
        match repo::apply_seen(
            tx,
            &transfer.merchant_id,
            &transfer.intent_id,
            seen,
            &change,
        )
        .await
        {
            Ok(None) => Err(WatchError::Unexpected(format!(
                "payment intent {} changed under its row lock",
                transfer.intent_id
            ))),
            Ok(Some(intent)) => {
                tracing::info!(intent = %intent.id, state = %intent.state, received = %intent.amount_received, "deposit counted");
                Ok(Some(intent))
            }
            Err(TransitionError::Forbidden { from, .. }) => {
                tracing::warn!(intent = %transfer.intent_id, %from, "a deposit for an intent that cannot move: recorded");
                Ok(None)
            }
            Err(TransitionError::NotFound) => Ok(None),
            Err(TransitionError::Database(e)) => Err(e.into()),
        }
    }
}
