//! Sweeping a deposit address: the first sweep of an intent's forwarder deploys it and flushes
//! in one factory call (`deployAndFlush`); once a sweep was seen leaving the address, later ones
//! call the forwarder's `flush` directly. Both flush the whole balance to the merchant, so a
//! sweep queued after an earlier one took everything moves nothing and costs only its gas.

use alloy::{
    primitives::{Address, Bytes},
    sol_types::SolCall,
};
use sqlx::PgConnection;

use super::watch::DepositKind;
use crate::{
    config::ChainEndpoint,
    ledger::Account,
    rails::evm::deposit::{DepositForwarder, DepositForwarderFactory, intent_key},
    rails::follower::ObservationKind,
    rails::outbox::{self, BoxFuture, NewSubmission, SubmissionKind, Wanted},
};

/// The outbox kind of a sweep: its subject is the intent's id.
pub const KIND: &str = "deposit_sweep";

/// What to sweep: `token` from the forwarder of the intent `intent_id` of `merchant` (its payee
/// address), made for `intent_token`, at `deposit_address`.
pub struct Sweep<'a> {
    pub intent_id: &'a str,
    pub merchant: Address,
    pub intent_token: Address,
    pub deposit_address: Address,
    pub token: Address,
    /// The deposit this sweep follows (transaction hash and log index): one sweep per deposit.
    pub after: (&'a str, i32),
}

/// Queues the sweep in the caller's transaction; `None` if `chain` has no factory (any more).
pub async fn queue(
    tx: &mut PgConnection,
    chain: &ChainEndpoint,
    sweep: &Sweep<'_>,
) -> Result<Option<uuid::Uuid>, sqlx::Error> {
    let Some(factory) = chain.deposit_factory else {
        return Ok(None);
    };
    let deployed = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM chain_observations
                           WHERE kind = $2 AND subject = $1 AND applied_at IS NOT NULL
                             AND chain_id = $3 AND payload->>'deposit_address' = $4) AS "deployed!""#,
        sweep.intent_id,
        DepositKind::Swept.as_str(),
        chain.id as i64,
        sweep.deposit_address.to_checksum(None),
    )
    .fetch_one(&mut *tx)
    .await?;
    let (target, calldata) = if deployed {
        let call = DepositForwarder::flushCall { token: sweep.token };
        (sweep.deposit_address, call.abi_encode())
    } else {
        let call = DepositForwarderFactory::deployAndFlushCall {
            merchant: sweep.merchant,
            token: sweep.intent_token,
            intent: intent_key(sweep.intent_id),
            flushed: sweep.token,
        };
        (factory, call.abi_encode())
    };
    let submission = NewSubmission {
        kind: KIND,
        subject: sweep.intent_id,
        chain_id: chain.id,
        dedupe_key: format!(
            "{KIND}:{}:{}:{}",
            sweep.deposit_address, sweep.after.0, sweep.after.1
        ),
        target,
        calldata: Bytes::from(calldata),
        sender: None,
        after: None,
    };
    outbox::queue(tx, &submission).await.map(Some)
}

/// A sweep is wanted while the ledger says one of the intent's deposit addresses (an order has
/// one per option) holds something.
pub struct DepositSweep;

impl SubmissionKind for DepositSweep {
    fn name(&self) -> &'static str {
        KIND
    }

    fn still_wanted<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<Wanted, sqlx::Error>> {
        Box::pin(async move {
            let addresses = crate::intents::repo::deposit_addresses_of(conn, subject).await?;
            if addresses.is_empty() {
                return Ok(Wanted::No("intent_missing".to_owned()));
            }
            let accounts: Vec<String> = addresses
                .iter()
                .map(|address| Account::DepositAddress(address).name())
                .collect();
            let holds = sqlx::query_scalar!(
                r#"SELECT EXISTS (SELECT 1 FROM ledger_postings WHERE account = ANY($1::text[])
                                   GROUP BY account, chain, token HAVING sum(amount) > 0) AS "holds!""#,
                &accounts,
            )
            .fetch_one(conn)
            .await?;
            Ok(if holds {
                Wanted::Yes
            } else {
                Wanted::No("deposit_swept".to_owned())
            })
        })
    }
}
