//! The payment watch: what the chain follower looks for on behalf of intents, and what a confirmed
//! log changes (`docs/settlement.md`, "Follower and watches"). It wants `AuthorizationUsed` and
//! `AuthorizationCanceled` of the EIP-3009 tokens read on that chain; a use of an intent's nonce
//! by its payer settles the intent if the same transaction's transfer paid it and fails it
//! otherwise; a cancellation fails it. Either holds the intent's expiry off (`ExpiryHolds`).
//! An authorization of an order's option that its payer submitted without a confirm chooses
//! that option if the order has none yet, and is a duplicate payment if it has another.

use alloy::rpc::types::Log;
use sqlx::PgConnection;

use crate::{
    config::ChainEndpoint,
    intents::{
        payment::{NonceUse, PaymentOutcome, Seen, apply_nonce_use},
        repo,
    },
    rails::{
        eip3009::{nonce_interest, nonce_log, transfer_after},
        follower::{
            FollowError, Interest, Observation, ObservationKind, Observed, Watch, WatchError,
        },
        rpc::Node,
    },
};

/// What the payment watch records of an intent's nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceKind {
    /// Used by its payer (`AuthorizationUsed`).
    Used,
    /// Canceled by its payer (`AuthorizationCanceled`): the intent can never be paid with it.
    Canceled,
}

impl ObservationKind for NonceKind {
    const ALL: &'static [Self] = &[Self::Used, Self::Canceled];

    fn as_str(self) -> &'static str {
        match self {
            Self::Used => "authorization_used",
            Self::Canceled => "authorization_canceled",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct PaymentWatch;

impl Watch for PaymentWatch {
    type Outcome = PaymentOutcome;

    fn applies(&self, kind: &str) -> bool {
        NonceKind::parse(kind).is_some()
    }

    async fn interest(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
    ) -> Result<Interest, sqlx::Error> {
        nonce_interest(conn, chain).await
    }

    async fn observe(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        node: &Node,
        log: &Log,
    ) -> Result<Option<Observed>, FollowError> {
        let Some((kind, authorizer, nonce)) = nonce_log(log, NonceKind::Used, NonceKind::Canceled)
        else {
            return Ok(None);
        };
        let token = log.address().to_checksum(None);
        let intent = repo::by_chain_nonce(
            conn,
            &chain.name,
            &token,
            &authorizer.to_checksum(None),
            nonce.as_slice(),
            repo::NonceSpace::Eip3009,
        )
        .await?;
        let Some(intent) = intent else {
            return Ok(None);
        };
        let transfer = match kind {
            NonceKind::Used => transfer_after(node, log).await?,
            NonceKind::Canceled => None,
        };
        let id = intent.id.clone();
        let payload = NonceUse::of(intent, token, authorizer.to_checksum(None), transfer);
        Observed::new(kind, id, &payload).map(Some)
    }

    /// What the use or cancellation makes of the intent (`intents::payment::apply_nonce_use`).
    async fn apply(
        &self,
        tx: &mut PgConnection,
        chain: &ChainEndpoint,
        o: &Observation,
    ) -> Result<PaymentOutcome, WatchError> {
        let (kind, used): (NonceKind, NonceUse) = o.read()?;
        let seen = match kind {
            NonceKind::Used => Seen::Used,
            NonceKind::Canceled => Seen::Canceled,
        };
        apply_nonce_use(tx, chain, o, seen, &used).await
    }
}
