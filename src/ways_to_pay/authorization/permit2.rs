//! An intent paid by Permit2 (`payment_method: "permit2"`, `docs/settlement.md`, "Permit2"): for
//! any ERC-20, the payer signs Permit2's `PermitWitnessTransferFrom` for x402's exact proxy,
//! whose witness names the merchant, so the signature can pay the merchant and no one else,
//! whoever sends it. The permit's nonce is the intent's, so Permit2 spends it once; its deadline
//! is the intent's last second.

use alloy::{
    primitives::{Address, B256, Bytes, U256},
    providers::Provider,
};
use sqlx::PgConnection;

use crate::{
    error::ApiError,
    intents::payment::KIND,
    rails::{
        Chains,
        eip3009::{
            Approval, ApprovalTransaction, AuthorizationDocument, Terms, TokenPermitDocument,
            dedupe_key,
        },
        evm::{
            authorization::PayerSignature,
            eip2612,
            permit2::{self, PERMIT2, ProxyPermit, Shortfall, TokenPermit, X402_EXACT_PROXY},
        },
        outbox::{self, NewSubmission},
        rpc::ChainError,
    },
};

/// The permit that pays `terms`: the same payer, merchant, amount and nonce as an EIP-3009
/// authorization of them, read as Permit2 reads them.
pub fn permit(chains: &Chains, terms: &Terms<'_>) -> Result<ProxyPermit, ApiError> {
    let (endpoint, _) = chains
        .get(terms.chain)
        .ok_or_else(|| ApiError::internal("the caller checked the chain"))?;
    let address = |raw: &str| {
        raw.parse::<Address>()
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored address {raw}: {e}")))
    };
    let amount = terms
        .value
        .parse::<U256>()
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored amount: {e}")))?;
    Ok(ProxyPermit {
        chain_id: endpoint.id,
        token: address(terms.token)?,
        amount,
        owner: address(terms.from)?,
        to: address(terms.to)?,
        nonce: U256::from_be_bytes(terms.nonce),
        // EIP-3009's validBefore is the first second it no longer pays in; Permit2's deadline is
        // the last one it does.
        deadline: U256::from(terms.valid_before.saturating_sub(1)),
        valid_after: U256::ZERO,
        facilitator: None,
        token_permit: None,
    })
}

/// What the payer signs: the permit as `eth_signTypedData_v4` takes it, and its digest; and while
/// the token does not let Permit2 move the amount, the approval of Permit2 to send first (encoded
/// here, so a payer's wallet needs no ABI of its own) and, where the token has EIP-2612, the
/// token's permit to sign instead.
pub async fn document(
    chains: &Chains,
    chain: &str,
    permit: &ProxyPermit,
) -> Result<AuthorizationDocument, ApiError> {
    let (_, node) = chains
        .get(chain)
        .ok_or_else(|| ApiError::internal("the caller checked the chain"))?;
    let unavailable = |e: ChainError| {
        ApiError::ChainUnavailable(format!(
            "whether the payer {} has approved Permit2 for token {} needs {chain}, which did not answer ({e}); retry later",
            permit.owner, permit.token
        ))
    };
    let (_, allowance) = permit2::owner_funds(node, permit.token, permit.owner)
        .await
        .map_err(unavailable)?;
    let token_permit = if allowance < permit.amount {
        let terms = eip2612::terms(
            node,
            permit.chain_id,
            permit.token,
            permit.owner,
            PERMIT2,
            permit.amount,
            permit.deadline,
        )
        .await
        .map_err(unavailable)?;
        terms.map(|terms| TokenPermitDocument {
            typed_data: terms.typed_data(),
            digest: terms.digest().to_string(),
        })
    } else {
        None
    };
    let approval = (allowance < permit.amount).then(|| {
        // Tether's `approve` refuses to change an allowance that is not zero.
        let steps = if allowance.is_zero() {
            vec![permit.amount]
        } else {
            vec![U256::ZERO, permit.amount]
        };
        Approval {
            token: permit.token.to_checksum(None),
            spender: PERMIT2.to_checksum(None),
            allowance: allowance.to_string(),
            amount: permit.amount.to_string(),
            transactions: steps
                .into_iter()
                .map(|amount| ApprovalTransaction {
                    to: permit.token.to_checksum(None),
                    data: permit2::approve_calldata(amount).to_string(),
                })
                .collect(),
        }
    });
    Ok(AuthorizationDocument {
        typed_data: permit.typed_data(),
        digest: permit.digest().to_string(),
        approval,
        token_permit,
    })
}

/// The payer's EIP-2612 permit for Permit2 (`token_permit_signature` of a confirm), signed over
/// the document's terms: the payment's amount, until its deadline. Whether the token takes it is
/// the token's to say, when [`signed`] simulates the settle that submits it.
pub fn token_permit(permit: &ProxyPermit, raw: &str) -> Result<TokenPermit, ApiError> {
    let signature = PayerSignature::parse(raw)
        .map_err(|why| ApiError::InvalidRequest(format!("token_permit_signature: {why}")))?;
    Ok(TokenPermit {
        value: permit.amount,
        deadline: permit.deadline,
        signature: signature.to_bytes(),
    })
}

/// The payer's signature of `permit`, as the proxy will pass it to Permit2, once the chain says
/// it would pay (with the payer's token permit, if it carries one): 400 for a signature that is
/// not the payer's, or a token permit the token refuses, 422 `permit2_allowance_required` while
/// the payer has not approved Permit2 for the amount. A short balance is not refused: the
/// payment waits for it, as an EIP-3009 one does (`pending_reason: insufficient_balance`).
pub async fn signed(
    chains: &Chains,
    chain: &str,
    permit: &ProxyPermit,
    signature: &str,
) -> Result<Bytes, ApiError> {
    let (_, node) = chains
        .get(chain)
        .ok_or_else(|| ApiError::internal("the caller checked the chain"))?;
    let unavailable = |e: ChainError| {
        ApiError::ChainUnavailable(format!(
            "checking the permit needs {chain}, which did not answer ({e}); nothing was changed, retry later"
        ))
    };
    for (contract, what) in [
        (PERMIT2, "Permit2"),
        (X402_EXACT_PROXY, "x402's exact proxy"),
    ] {
        let code = node
            .get_code_at(contract)
            .await
            .map_err(|e| unavailable(e.into()))?;
        if code.is_empty() {
            return Err(ApiError::ChainNotSettled(format!(
                "{what} ({contract}) is not on {chain}, so an intent cannot be paid by Permit2 there"
            )));
        }
    }
    let signature = permit2::owner_signed(node, permit, signature)
        .await
        .map_err(unavailable)?
        .map_err(|why| ApiError::InvalidRequest(format!("signature: {why}")))?;
    match permit2::shortfall(node, permit, permit.amount, signature.clone())
        .await
        .map_err(unavailable)?
    {
        None | Some(Shortfall::Balance(_)) => Ok(signature),
        // The proxy goes on when the token refuses a permit: then the allowance is short.
        Some(Shortfall::Allowance(allowance)) if permit.token_permit.is_some() => {
            Err(ApiError::InvalidRequest(format!(
                "token_permit_signature: token {} does not take it as the payer's permit for Permit2 to move {} (its allowance stays {allowance}); sign the document's token_permit again",
                permit.token, permit.amount
            )))
        }
        Some(Shortfall::Allowance(allowance)) => Err(ApiError::Permit2AllowanceRequired(format!(
            "the payer {} lets Permit2 move {allowance} of token {}, the payment is {}: it approves Permit2 ({PERMIT2}) for the token, then confirms again",
            permit.owner, permit.token, permit.amount
        ))),
        Some(Shortfall::Refused(reason)) => Err(ApiError::InvalidRequest(format!(
            "signature: x402's exact proxy would not settle this permit: {reason}"
        ))),
    }
}

/// Queues the proxy's settle of the signed permit as the intent's payment, in the caller's
/// transaction. Its key is Permit2's: the owner's nonce, which no token shares.
pub async fn queue(
    conn: &mut PgConnection,
    intent_id: &str,
    permit: &ProxyPermit,
    signature: &Bytes,
) -> Result<(), sqlx::Error> {
    let submission = NewSubmission {
        kind: KIND,
        subject: intent_id,
        chain_id: permit.chain_id,
        dedupe_key: dedupe_key(PERMIT2, permit.owner, B256::from(permit.nonce)),
        target: X402_EXACT_PROXY,
        calldata: permit.settle_calldata(permit.amount, signature.clone()),
        sender: None,
        after: None,
    };
    outbox::queue(conn, &submission).await?;
    Ok(())
}
