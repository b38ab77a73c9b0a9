//! Paying an intent by EIP-3009 authorization: which intents may be paid, the document the payer
//! signs, the confirm that checks the signature and queues the submission in the caller's
//! transaction, and the submission kind that says when it is no longer wanted. Routes call these, and so will every other way a payer reaches us (a checkout
//! page, an x402 facilitator), so each rule is in one place (`docs/settlement.md`).

use alloy::primitives::{Address, B256, U256};
use sqlx::PgConnection;

use super::{
    Chains,
    outbox::{self, BoxFuture, Hold, NewSubmission, SubmissionKind, Wanted},
    tokens::{self, ResolveError},
};
use crate::{
    auth::MerchantId,
    chain::{
        authorization::{self, Authorization, PayerProof, PayerSignature, WalletAnswer},
        token::TokenSupport,
    },
    error::ApiError,
    intents::{
        domain::{self, IntentId, PaymentMethod},
        repo::{self, PaymentIntent, TransitionError},
        state::{Action, Actor, IntentState},
    },
};

/// The authorization that pays the merchant's intent `raw_id`, if it can be paid now.
pub async fn authorization(
    conn: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    raw_id: &str,
) -> Result<Authorization, ApiError> {
    let intent = payable(conn, chains, merchant, raw_id).await?;
    Ok(authorization_of(conn, chains, &intent).await?.0)
}

/// Confirms the intent with the payer's `signature` of its authorization: `created` →
/// `processing` and the submission queued, both in `tx`, or nothing. `actor` is who sent it (the
/// merchant, or the payer through the checkout page).
pub async fn confirm(
    tx: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    raw_id: &str,
    signature: &str,
    actor: &Actor,
) -> Result<PaymentIntent, ApiError> {
    let intent = payable(tx, chains, merchant, raw_id).await?;
    let (authorization, token) = authorization_of(tx, chains, &intent).await?;
    let proof = authorizer_proof(
        chains,
        &intent.chain,
        &authorization,
        &token,
        signature,
        "payer",
    )
    .await?;
    let confirmed = repo::apply_paid(
        tx,
        merchant.as_str(),
        &intent.id,
        Action::Confirm,
        actor,
        None,
    )
    .await
    .map_err(|e| transition_error(&intent.id, e))?;
    queue_authorization(tx, KIND, &intent.id, &authorization, &proof).await?;
    Ok(confirmed)
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
            _ => Err(ApiError::TokenNotSupported(format!(
                "token {} on {chain} has no transferWithAuthorization with a bytes signature, so a contract wallet (the {who} {}) cannot sign for it",
                authorization.token, authorization.from
            ))),
        },
    }
}

/// A contract wallet's signature, once the token itself says it checks such signatures: a token
/// with the `bytes signature` form may still check only keys. Asked by simulating the transfer;
/// a revert for another reason (a short balance, a used nonce) is not the signature's fault, and
/// is left to the checks and the relayer that look at those.
async fn token_takes_contract_signature(
    node: &crate::chain::rpc::Node,
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
    // Only a refusal that is no fault of the signature (the nonce, the window, the balance, a
    // pause: each checked or held elsewhere) lets the signature pass.
    let window = |reason: &str| {
        let reason = reason.to_ascii_lowercase();
        reason.contains("not yet valid") || reason.contains("expired")
    };
    match refused {
        None => Ok(proof),
        Some(reason)
            if window(&reason)
                || matches!(
                    outbox::Revert::of_eip3009(&reason),
                    outbox::Revert::Spent | outbox::Revert::NotYet(_)
                ) =>
        {
            Ok(proof)
        }
        Some(reason) => Err(ApiError::TokenNotSupported(format!(
            "token {} on {chain} does not take a contract wallet's signature (ERC-1271) from the {who} {}: it checks only keys' signatures, or refuses this one ({reason})",
            authorization.token, authorization.from
        ))),
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

/// The intent, if it can be paid by authorization now: it exists, is `created`, and its chain is
/// settled here.
async fn payable(
    conn: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    raw_id: &str,
) -> Result<PaymentIntent, ApiError> {
    let not_found = || ApiError::NotFound("no payment intent with that id".to_owned());
    let id = IntentId::parse(raw_id).ok_or_else(not_found)?;
    let intent = repo::find(conn, merchant, &id)
        .await?
        .ok_or_else(not_found)?;
    if intent.payment_method != PaymentMethod::Authorization {
        return Err(ApiError::InvalidRequest(format!(
            "payment intent {}: it is paid by transfers to its deposit_address, not by an authorization",
            intent.id
        )));
    }
    if intent.state != IntentState::Created {
        return Err(ApiError::InvalidStateTransition(format!(
            "payment intent {}: a {} payment intent cannot be paid",
            intent.id, intent.state
        )));
    }
    served(
        chains,
        &intent.chain,
        &format!("payment intent {}", intent.id),
    )?;
    Ok(intent)
}

/// The authorization that pays `intent`, under its token's EIP-712 domain, and what the token is.
async fn authorization_of(
    conn: &mut PgConnection,
    chains: &Chains,
    intent: &PaymentIntent,
) -> Result<(Authorization, TokenSupport), ApiError> {
    let terms = Terms {
        chain: &intent.chain,
        token: &intent.token,
        from: intent.payer.as_deref().unwrap_or_default(),
        to: &intent.merchant,
        value: &intent.amount,
        valid_before: valid_before(intent.expires_at),
        nonce: domain::chain_nonce(&intent.id),
    };
    authorization_for(conn, chains, &terms).await
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

/// The outbox kind of an intent's payment: its subject is the intent's id.
pub const KIND: &str = "intent_payment";

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
    };
    outbox::queue(conn, &submission).await?;
    Ok(())
}

/// What the token accepts once: this authorizer's nonce on this token. A submission's dedupe key.
pub fn dedupe_key(token: Address, authorizer: Address, nonce: B256) -> String {
    format!("{token}:{authorizer}:{nonce}")
}

/// An intent's payment is wanted while the intent is `processing`: once the payment watch (or
/// expiry) moved it, there is nothing left to send.
pub struct IntentPayment;

impl SubmissionKind for IntentPayment {
    fn name(&self) -> &'static str {
        KIND
    }

    fn still_wanted<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<Wanted, sqlx::Error>> {
        Box::pin(async move {
            let state = sqlx::query_scalar!(
                r#"SELECT state AS "state: IntentState" FROM payment_intents WHERE id = $1"#,
                subject
            )
            .fetch_optional(conn)
            .await?;
            Ok(match state {
                Some(IntentState::Processing) => Wanted::Yes,
                Some(other) => Wanted::No(format!("intent_{other}")),
                None => Wanted::No("intent_missing".to_owned()),
            })
        })
    }

    /// The intent says why it waits (`pending_reason`, an event once per change).
    fn held<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        subject: &'a str,
        hold: Hold,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let intent = sqlx::query!(
                r#"SELECT merchant_id, state AS "state: IntentState", pending_reason
                     FROM payment_intents WHERE id = $1"#,
                subject
            )
            .fetch_optional(&mut *conn)
            .await?;
            let Some(intent) = intent else { return Ok(()) };
            if intent.state != IntentState::Processing
                || intent.pending_reason.as_deref() == Some(hold.code())
            {
                return Ok(());
            }
            let moved = repo::apply_with(
                conn,
                &intent.merchant_id,
                subject,
                Action::Hold,
                &Actor::Chain,
                None,
                Some(hold.code()),
            )
            .await;
            match moved {
                Ok(_) | Err(TransitionError::NotFound | TransitionError::Forbidden { .. }) => {
                    Ok(())
                }
                Err(TransitionError::Database(e)) => Err(e),
            }
        })
    }
}

fn transition_error(id: &str, error: TransitionError) -> ApiError {
    match error {
        TransitionError::NotFound => ApiError::NotFound(format!("no payment intent {id}")),
        e @ TransitionError::Forbidden { .. } => {
            ApiError::InvalidStateTransition(format!("payment intent {id}: {e}"))
        }
        TransitionError::Database(e) => e.into(),
    }
}
