//! The watch of payments by Permit2, an intent's payer's or an x402 client's (`docs/x402.md`,
//! "Permit2"): Permit2 logs nothing of a nonce it spends, so the watch looks for x402's proxies'
//! `Settled()` and `SettledWithPermit()`, reads the permit from the call that logged it, and the
//! transfer the proxy made just before. A permit of an intent of ours is then what an EIP-3009
//! nonce use is (`intents::payment::apply_nonce_use`): the intent succeeds if the transfer paid
//! it, and is booked.

use alloy::{
    consensus::Transaction as _, providers::Provider, rpc::types::Log, sol_types::SolEvent,
};
use sqlx::PgConnection;

use crate::{
    config::ChainEndpoint,
    intents::{
        payment::{NonceUse, PaymentOutcome, Seen, apply_nonce_use},
        repo,
    },
    rails::{
        eip3009::Transfer,
        evm::{
            permit2::{ProxyPermit, X402_EXACT_PROXY, X402_UPTO_PROXY, settled_topics},
            token::Eip3009,
        },
        follower::{
            FollowError, Interest, Observation, ObservationKind, Observed, Watch, WatchError,
        },
        rpc::{ChainError, Node},
    },
};

/// What the watch records of a permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermitKind {
    /// Settled through the exact proxy: its nonce is spent.
    Used,
}

impl ObservationKind for PermitKind {
    const ALL: &'static [Self] = &[Self::Used];

    fn as_str(self) -> &'static str {
        "permit2_used"
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Permit2Watch;

impl Watch for Permit2Watch {
    type Outcome = PaymentOutcome;

    fn applies(&self, kind: &str) -> bool {
        PermitKind::parse(kind).is_some()
    }

    async fn interest(
        &self,
        _: &mut PgConnection,
        _: &ChainEndpoint,
    ) -> Result<Interest, sqlx::Error> {
        Ok(Interest {
            addresses: vec![X402_EXACT_PROXY, X402_UPTO_PROXY],
            events: settled_topics().to_vec(),
            sent_to: Vec::new(),
        })
    }

    async fn observe(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        node: &Node,
        log: &Log,
    ) -> Result<Option<Observed>, FollowError> {
        let proxy = log.address();
        if ![X402_EXACT_PROXY, X402_UPTO_PROXY].contains(&proxy)
            || !log
                .topics()
                .first()
                .is_some_and(|t| settled_topics().contains(t))
        {
            return Ok(None);
        }
        let (Some(hash), Some(settled_at)) = (log.transaction_hash, log.log_index) else {
            return Ok(None);
        };
        let sent = node
            .get_transaction_by_hash(hash)
            .await
            .map_err(ChainError::from)?
            .ok_or_else(|| ChainError::Refused(format!("no transaction {hash}")))?;
        // Only a call of the proxy itself says which permit it settled; one made through another
        // contract is not read (docs/x402.md, "Permit2").
        let permit = (sent.to() == Some(proxy))
            .then(|| ProxyPermit::of_settle_calldata(chain.id, proxy, sent.input()))
            .flatten();
        let Some((permit, _charged)) = permit else {
            tracing::warn!(chain = %chain.name, tx = %hash, "x402's exact proxy settled a permit through another contract: not read");
            return Ok(None);
        };
        let (token, owner) = (
            permit.token.to_checksum(None),
            permit.owner.to_checksum(None),
        );
        let nonce = alloy::primitives::B256::from(permit.nonce);
        let Some(intent) = repo::by_chain_nonce(
            conn,
            &chain.name,
            &token,
            &owner,
            nonce.as_slice(),
            repo::NonceSpace::Permit2,
        )
        .await?
        else {
            return Ok(None);
        };
        let transfer = transfer_before(node, hash, permit.token, settled_at).await?;
        let id = intent.id.clone();
        let payload = NonceUse::of(intent, token, owner, transfer);
        Observed::new(PermitKind::Used, id, &payload).map(Some)
    }

    async fn apply(
        &self,
        tx: &mut PgConnection,
        chain: &ChainEndpoint,
        o: &Observation,
    ) -> Result<PaymentOutcome, WatchError> {
        let (PermitKind::Used, used): (PermitKind, NonceUse) = o.read()?;
        apply_nonce_use(tx, chain, o, Seen::Used, &used).await
    }
}

/// The last `Transfer` of `token` in transaction `hash` before the log at `index`: the one the
/// proxy made for the permit it then announced.
async fn transfer_before(
    node: &Node,
    hash: alloy::primitives::B256,
    token: alloy::primitives::Address,
    index: u64,
) -> Result<Option<Transfer>, FollowError> {
    let receipt = node
        .get_transaction_receipt(hash)
        .await?
        .ok_or_else(|| ChainError::Refused(format!("no receipt for {hash}")))?;
    Ok(receipt
        .inner
        .logs()
        .iter()
        .filter(|l| l.address() == token && l.log_index.is_some_and(|i| i < index))
        .filter_map(|l| Eip3009::Transfer::decode_log_data(l.data()).ok())
        .next_back()
        .map(|t| Transfer {
            from: t.from.to_checksum(None),
            to: t.to.to_checksum(None),
            value: t.value.to_string(),
        }))
}
