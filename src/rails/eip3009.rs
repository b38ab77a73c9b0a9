//! What every EIP-3009 authorization of ours shares, whichever way to pay has it signed (an
//! intent's payer, a refund's merchant, an x402 client): its terms under the token's EIP-712
//! domain, the document and the confirm's request, the proof that the authorizer signed it (a key,
//! or a contract wallet through ERC-1271), its submission to the outbox, and the logs that show its
//! nonce used (`docs/settlement.md`).

use alloy::{
    primitives::{Address, B256, U256},
    providers::Provider,
    rpc::types::Log,
    sol_types::SolEvent,
};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;

use super::{
    Chains,
    evm::{
        authorization::{self, Authorization, PayerProof, PayerSignature, WalletAnswer},
        erc6492,
        token::{Eip3009, TokenSupport},
    },
    follower::{FollowError, Interest},
    outbox::{self, NewSubmission},
    rpc::{ChainError, Node},
    tokens::{self, ResolveError},
};
use crate::{config::ChainEndpoint, error::ApiError};

/// What the authorizer signs: the payer to pay an intent, the merchant to refund one.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuthorizationDocument {
    /// The EIP-712 document exactly as `eth_signTypedData_v4` takes it.
    #[schema(value_type = Object)]
    pub typed_data: serde_json::Value,
    /// Its EIP-712 digest, `0x` + 64 hex digits.
    pub digest: String,
    /// For a Permit2 payment whose payer has not yet let Permit2 move the amount (as the chain
    /// showed when the document was made): the approval to send first. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// Where the token has EIP-2612 and the approval above is due: the token's permit for Permit2
    /// to sign instead of sending the approval. Its signature goes with the confirm
    /// (`token_permit_signature`), and the payment submits it: the payer sends no transaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_permit: Option<TokenPermitDocument>,
}

/// A token's EIP-2612 permit for Permit2, to sign as the payment's document is signed.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenPermitDocument {
    /// The EIP-712 document exactly as `eth_signTypedData_v4` takes it (primary type `Permit`).
    #[schema(value_type = Object)]
    pub typed_data: serde_json::Value,
    /// Its EIP-712 digest, `0x` + 64 hex digits.
    pub digest: String,
}

/// An approval a payer sends from its wallet before its Permit2 signature can pay.
#[derive(Debug, Serialize, ToSchema)]
pub struct Approval {
    /// The token, EIP-55.
    pub token: String,
    /// Permit2, which the token is to let move the payer's tokens.
    pub spender: String,
    /// What the payer lets it move now, token base units.
    pub allowance: String,
    /// What the payment needs it to let move, token base units.
    pub amount: String,
    /// The transactions to send from the payer's address, in order: `approve(spender, amount)`,
    /// after `approve(spender, 0)` where an allowance is left (Tether's `approve` refuses to
    /// change one that is not zero).
    pub transactions: Vec<ApprovalTransaction>,
}

/// A call the payer's wallet sends (`eth_sendTransaction`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalTransaction {
    /// The contract called, EIP-55.
    pub to: String,
    /// The calldata, `0x`-hex.
    pub data: String,
}

impl AuthorizationDocument {
    pub fn of(authorization: &Authorization) -> Self {
        Self {
            typed_data: authorization.typed_data(),
            digest: authorization.digest().to_string(),
            approval: None,
            token_permit: None,
        }
    }
}

/// A confirm: the authorizer's signature of the authorization's digest.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmRequest {
    /// `0x` + 130 hex digits: r, s, v (27/28 or 0/1), s in the lower half (EIP-2).
    #[schema(pattern = "^0x[0-9a-fA-F]{130}$")]
    pub signature: String,
}

/// Whether `signature` is the authorizer's (`who`: the payer of an intent, the merchant of a
/// refund) over the authorization's digest: made by its key (checked here, no chain needed), or
/// else accepted by its smart-contract wallet, asked on chain through ERC-1271
/// `isValidSignature`; a contract's signature also needs a token with the `bytes signature`
/// form, which passes it to the same check.
pub async fn authorizer_proof(
    chains: &Chains,
    chain: &str,
    authorization: &Authorization,
    token: &TokenSupport,
    signature: &str,
    who: &str,
) -> Result<PayerProof, ApiError> {
    let bytes = authorization::signature_bytes(signature)
        .map_err(|why| ApiError::InvalidRequest(format!("signature: {why}")))?;
    let digest = authorization.digest();
    let by_key = PayerSignature::parse(signature).and_then(|signature| {
        let signer = signature.signer(&digest)?;
        if signer == authorization.from {
            Ok(signature)
        } else {
            Err(format!(
                "signed by {signer}, not by the {who} {}",
                authorization.from
            ))
        }
    });
    let why_not_key = match by_key {
        Ok(signature) => return Ok(PayerProof::Key(signature)),
        Err(why) => why,
    };
    let (_, node) = chains
        .get(chain)
        .ok_or_else(|| ApiError::internal("the caller checked the chain"))?;
    let answer = authorization::ask_wallet(node, authorization.from, digest, &bytes)
        .await
        .map_err(|e| {
            ApiError::ChainUnavailable(format!(
                "the signature is not the {who}'s key's, and whether the {who} {} is a contract wallet that accepts it needs its chain, which did not answer ({e}); nothing was changed, retry later",
                authorization.from
            ))
        })?;
    match answer {
        WalletAnswer::NotAContract => Err(ApiError::InvalidRequest(format!(
            "signature: {why_not_key}"
        ))),
        WalletAnswer::Refuses => Err(ApiError::InvalidRequest(format!(
            "signature: the {who} {} is a contract wallet and refuses it (ERC-1271 isValidSignature)",
            authorization.from
        ))),
        WalletAnswer::Accepts => match token {
            TokenSupport::Eip3009 {
                contract_signatures: true,
                ..
            } => token_takes_contract_signature(node, chain, authorization, bytes, who).await,
            _ => Err(no_contract_signatures(chain, authorization, who)),
        },
    }
}

/// A contract wallet's signature, once the token itself says it checks such signatures: a token
/// with the `bytes signature` form may still check only keys. Asked by simulating the transfer;
/// a revert for another reason (a short balance, a used nonce) is not the signature's fault, and
/// is left to the checks and the relayer that look at those.
async fn token_takes_contract_signature(
    node: &crate::rails::rpc::Node,
    chain: &str,
    authorization: &Authorization,
    bytes: alloy::primitives::Bytes,
    who: &str,
) -> Result<PayerProof, ApiError> {
    let proof = PayerProof::Contract(bytes);
    let refused = authorization::simulate_transfer(node, authorization, &proof)
        .await
        .map_err(|e| {
            ApiError::ChainUnavailable(format!(
                "whether token {} takes a contract wallet's signature needs its chain, which did not answer ({e}); nothing was changed, retry later",
                authorization.token
            ))
        })?;
    match refused {
        Some(reason) if !signature_passes(&reason) => {
            Err(token_refuses(chain, authorization, who, &reason))
        }
        _ => Ok(proof),
    }
}

/// Whether a simulated transfer's revert lets the signature pass: only a refusal that is no fault
/// of the signature (the nonce, the window, the balance, a pause: each checked or held elsewhere).
fn signature_passes(reason: &str) -> bool {
    let lower = reason.to_ascii_lowercase();
    lower.contains("not yet valid")
        || lower.contains("expired")
        || matches!(
            outbox::Revert::of_eip3009(reason),
            outbox::Revert::Spent | outbox::Revert::NotYet(_)
        )
}

/// A token without the `bytes signature` form, which no contract wallet can sign for.
fn no_contract_signatures(chain: &str, authorization: &Authorization, who: &str) -> ApiError {
    ApiError::TokenNotSupported(format!(
        "token {} on {chain} has no transferWithAuthorization with a bytes signature, so a contract wallet (the {who} {}) cannot sign for it",
        authorization.token, authorization.from
    ))
}

fn token_refuses(chain: &str, authorization: &Authorization, who: &str, reason: &str) -> ApiError {
    ApiError::TokenNotSupported(format!(
        "token {} on {chain} does not take a contract wallet's signature (ERC-1271) from the {who} {}: it checks only keys' signatures, or refuses this one ({reason})",
        authorization.token, authorization.from
    ))
}

/// The proof of an authorization signed by a contract wallet that is not deployed yet (ERC-6492):
/// in one simulation, the wallet is deployed by `wrapped`'s call, then asked whether it accepts
/// its signature (ERC-1271), then the token whether it takes the transfer. The caller has seen
/// that `authorization.from` holds no code and that the factory is one it allows.
pub async fn counterfactual_proof(
    node: &Node,
    chain: &str,
    authorization: &Authorization,
    token: &TokenSupport,
    wrapped: &erc6492::Wrapped,
    who: &str,
) -> Result<PayerProof, ApiError> {
    use alloy::sol_types::SolCall;
    if !matches!(
        token,
        TokenSupport::Eip3009 {
            contract_signatures: true,
            ..
        }
    ) {
        return Err(no_contract_signatures(chain, authorization, who));
    }
    let proof = PayerProof::Contract(wrapped.signature.clone());
    let ask_wallet = authorization::Erc1271::isValidSignatureCall {
        hash: authorization.digest(),
        signature: wrapped.signature.clone(),
    }
    .abi_encode();
    let calls = [
        (authorization.from, ask_wallet.into()),
        (authorization.token, authorization.calldata_for(&proof)),
    ];
    let simulated = erc6492::simulate_after(node, &wrapped.deployment, &calls)
        .await
        .map_err(|e| {
            ApiError::ChainUnavailable(format!(
                "whether the undeployed wallet {} accepts its signature needs its chain's simulation (eth_simulateV1), which did not answer ({e}); nothing was changed, retry later",
                authorization.from
            ))
        })?;
    let refused = |why: String| Err(ApiError::InvalidRequest(format!("signature: {why}")));
    let outcomes = match simulated {
        erc6492::Simulated::DeploymentFailed(reason) => {
            return refused(format!(
                "deploying the {who}'s wallet by its factory {} fails ({reason})",
                wrapped.deployment.factory
            ));
        }
        erc6492::Simulated::Calls(outcomes) => outcomes,
    };
    let magic = authorization::Erc1271::isValidSignatureCall::SELECTOR;
    match &outcomes[0] {
        Ok(answer) if answer.len() >= 4 && answer[..4] == magic => {}
        _ => {
            return refused(format!(
                "the {who} {} once deployed by its factory {} does not accept it (ERC-1271 isValidSignature)",
                authorization.from, wrapped.deployment.factory
            ));
        }
    }
    match &outcomes[1] {
        Err(reason) if !signature_passes(reason) => {
            Err(token_refuses(chain, authorization, who, reason))
        }
        _ => Ok(proof),
    }
}

/// Refuses a chain this server does not settle: `what` is the object that names it.
pub fn served(chains: &Chains, chain: &str, what: &str) -> Result<(), ApiError> {
    if chains.get(chain).is_some() {
        return Ok(());
    }
    let why = if chains.is_on() {
        "its CHAINS setting does not name it"
    } else {
        "settlement is off: CHAINS is not set"
    };
    Err(ApiError::ChainNotSettled(format!(
        "{what}: this server does not settle {chain} ({why}), so it cannot be paid through it"
    )))
}

/// What an EIP-3009 authorization of ours moves, as stored: on which chain, in which token, from
/// whom (who signs) to whom, how much, until when, under which nonce.
pub struct Terms<'a> {
    pub chain: &'a str,
    pub token: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub value: &'a str,
    pub valid_before: u64,
    pub nonce: [u8; 32],
}

/// The authorization of `terms` under its token's EIP-712 domain (read from the chain the first
/// time, `tokens::resolve`), and what the token is; 422 if the token cannot be paid so.
pub async fn authorization_for(
    conn: &mut PgConnection,
    chains: &Chains,
    terms: &Terms<'_>,
) -> Result<(Authorization, TokenSupport), ApiError> {
    let (endpoint, node) = chains
        .get(terms.chain)
        .ok_or_else(|| ApiError::internal("the caller checked the chain"))?;
    let address = |raw: &str| {
        raw.parse::<Address>()
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored address {raw}: {e}")))
    };
    let token = address(terms.token)?;
    let support = match tokens::resolve(conn, endpoint, node, token).await {
        Ok(support) => support,
        Err(ResolveError::Database(e)) => return Err(e.into()),
        Err(ResolveError::Chain(e)) => {
            return Err(ApiError::ChainUnavailable(format!(
                "token {token} on {} is not known yet and its chain did not answer ({e}); nothing was changed, retry later",
                terms.chain
            )));
        }
    };
    let (name, version) = match &support {
        TokenSupport::Eip3009 { name, version, .. } => (name.clone(), version.clone()),
        TokenSupport::NotSupported(why) => {
            return Err(ApiError::TokenNotSupported(format!(
                "token {token} on {} cannot be paid by EIP-3009 authorization: {why}",
                terms.chain
            )));
        }
    };
    let value = terms
        .value
        .parse::<U256>()
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored amount: {e}")))?;
    let authorization = Authorization {
        chain_id: endpoint.id,
        token,
        token_name: name,
        token_version: version,
        from: address(terms.from)?,
        to: address(terms.to)?,
        value,
        valid_after: 0,
        valid_before: terms.valid_before,
        nonce: B256::from(terms.nonce),
    };
    Ok((authorization, support))
}

/// An authorization is valid before its object's expiry, in whole seconds rounded down.
pub fn valid_before(expires_at: time::OffsetDateTime) -> u64 {
    expires_at.unix_timestamp().max(0) as u64
}

/// Queues the submission of a signed `authorization` of `kind` about `subject`, in the caller's
/// transaction.
pub async fn queue_authorization(
    conn: &mut PgConnection,
    kind: &'static str,
    subject: &str,
    authorization: &Authorization,
    proof: &PayerProof,
) -> Result<(), sqlx::Error> {
    let submission = NewSubmission {
        kind,
        subject,
        chain_id: authorization.chain_id,
        dedupe_key: dedupe_key(authorization.token, authorization.from, authorization.nonce),
        target: authorization.token,
        calldata: authorization.calldata_for(proof),
        sender: None,
        after: None,
    };
    outbox::queue(conn, &submission).await?;
    Ok(())
}

/// What the token accepts once: this authorizer's nonce on this token. A submission's dedupe key.
pub fn dedupe_key(token: Address, authorizer: Address, nonce: B256) -> String {
    format!("{token}:{authorizer}:{nonce}")
}

/// A token's `Transfer`, as an observation keeps it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Transfer {
    pub from: String,
    pub to: String,
    pub value: String,
}

impl Transfer {
    /// Whether it moved exactly `value` from `from` to `to`.
    pub fn moves(&self, from: &str, to: &str, value: &str) -> bool {
        self.from == from && self.to == to && self.value == value
    }
}

/// What the same transaction's next `Transfer` of the token after the nonce use `log` moved:
/// the transfer that `transferWithAuthorization` makes right after it announces the use.
pub async fn transfer_after(node: &Node, log: &Log) -> Result<Option<Transfer>, FollowError> {
    let (Some(tx_hash), Some(log_index)) = (log.transaction_hash, log.log_index) else {
        return Ok(None);
    };
    let receipt = node
        .get_transaction_receipt(tx_hash)
        .await?
        .ok_or_else(|| ChainError::Refused(format!("no receipt for {tx_hash}")))?;
    Ok(receipt
        .inner
        .logs()
        .iter()
        .filter(|l| l.address() == log.address() && l.log_index.is_some_and(|i| i > log_index))
        .find_map(|l| Eip3009::Transfer::decode_log_data(l.data()).ok())
        .map(|t| Transfer {
            from: t.from.to_checksum(None),
            to: t.to.to_checksum(None),
            value: t.value.to_string(),
        }))
}

/// The authorizer, nonce and kind (`used` or `canceled`) of an EIP-3009 nonce log, if it is one.
pub fn nonce_log<K>(
    log: &Log,
    used: K,
    canceled: K,
) -> Option<(K, alloy::primitives::Address, alloy::primitives::B256)> {
    if let Ok(e) = Eip3009::AuthorizationUsed::decode_log_data(log.data()) {
        Some((used, e.authorizer, e.nonce))
    } else if let Ok(e) = Eip3009::AuthorizationCanceled::decode_log_data(log.data()) {
        Some((canceled, e.authorizer, e.nonce))
    } else {
        None
    }
}

/// What the follower looks for on behalf of every EIP-3009 authorization of ours: nonce uses
/// and cancellations of the tokens read on the chain.
pub async fn nonce_interest(
    conn: &mut PgConnection,
    chain: &ChainEndpoint,
) -> Result<Interest, sqlx::Error> {
    // Every token an authorization was built for was read and stored first. A token stays of
    // interest once read, whatever a later reading says: a node that briefly answers "no code", or
    // an upgrade, must not let the follower pass blocks without looking at the token's logs.
    let tokens = tokens::known_on(conn, chain).await?;
    Ok(Interest {
        addresses: tokens.iter().filter_map(|t| t.parse().ok()).collect(),
        events: vec![
            Eip3009::AuthorizationUsed::SIGNATURE_HASH,
            Eip3009::AuthorizationCanceled::SIGNATURE_HASH,
        ],
        sent_to: Vec::new(),
    })
}
