//! `POST /x402/settle`: one payment, one success (`docs/x402.md`, "Settle"). A payment is the
//! (chain, contract that spends its nonce, payer, nonce) the client chose: the token for an
//! EIP-3009 authorization, Permit2 for a permit. The first settle of it
//! checks it as verify does, stores it as a payment intent of the merchant and queues its
//! submission, and commits that as a phase before it waits (`docs/design.md`, "Atomic phases"),
//! so the relayer sees it at once. Whoever then sees the transfer in a block first claims the one
//! `success: true`; every other settle of it hears the used nonce and the hash that paid it.

use std::time::Duration;

use alloy::{
    primitives::{Address, B256, Bytes, U256},
    providers::Provider,
};
use axum::{
    Extension, Json,
    extract::State,
    response::{IntoResponse, Response},
};
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use time::OffsetDateTime;
use tokio::time::Instant;

use super::{
    eip2612_gas_sponsoring,
    exact_evm::{self, Checked, Eip3009Payload, Request},
    exact_permit2::{self, CheckedPermit, Permit2Payload},
};
use crate::{
    auth::MerchantId,
    db::Pool,
    deadline::Deadline,
    error::ApiError,
    idempotency::{Phases, Tx, provisional},
    intents::{
        domain::{Address as IntentAddress, Amount, Chain, IntentId, Metadata},
        repo::{self, Expires, NewIntent, PaidBy, Priced, TransitionError},
        state::{Action, Actor, FailureReason},
    },
    rails::{
        Chains, eip3009,
        evm::{erc6492, permit2::PERMIT2},
        outbox::{self, NewSubmission},
    },
};

/// The recovery point of a settle whose payment is stored and queued: a takeover waits for it.
pub const STORED: &str = "payment_stored";

/// How long before the request's deadline a settle stops waiting, to answer (and store its answer)
/// in time.
const ANSWER_MARGIN: Duration = Duration::from_millis(1500);
/// How often a waiting settle looks again without a notification (one may be missed while the
/// listening connection reconnects).
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// `/settle`'s answer, the reference's shape: always 200, `success` says how it went.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    pub success: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// The transaction that paid it; `""` when none is known (the reference's convention).
    pub transaction: String,
    /// CAIP-2, as the payment named it.
    pub network: String,
    /// What an `upto` payment charged, in the token's base units (the reference's field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount: Option<String>,
}

/// What every answer about one payment shares.
struct Answer {
    network: String,
    payer: Option<String>,
    /// What an `upto` payment charges.
    charged: Option<String>,
}

impl Answer {
    fn success(&self, transaction: String) -> SettleResponse {
        SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            payer: self.payer.clone(),
            transaction,
            network: self.network.clone(),
            amount: self.charged.clone(),
        }
    }

    fn failure(
        &self,
        reason: &'static str,
        message: impl Into<String>,
        transaction: Option<String>,
    ) -> SettleResponse {
        SettleResponse {
            success: false,
            error_reason: Some(reason),
            error_message: Some(message.into()),
            payer: self.payer.clone(),
            transaction: transaction.unwrap_or_default(),
            network: self.network.clone(),
            amount: None,
        }
    }

    /// The failure a refused check says, as verify said it.
    fn failure_of(&self, refused: exact_evm::VerifyResponse) -> SettleResponse {
        let reason = refused
            .invalid_reason
            .unwrap_or("invalid_exact_evm_payload");
        let message = refused.invalid_message.unwrap_or_default();
        self.failure(reason, message, None)
    }
}

/// A payment's key, as the contract that spends its nonce once sees it.
#[derive(Debug, Clone)]
pub struct PaymentKey {
    pub chain: String,
    /// The token (EIP-3009), or Permit2.
    pub token: Address,
    pub authorizer: Address,
    pub nonce: B256,
}

/// A stored x402 payment.
#[derive(Debug, Clone)]
pub struct Held {
    pub merchant_id: String,
    pub intent_id: String,
    pub fingerprint: Vec<u8>,
    pub success_tx: Option<String>,
    pub success_key: Option<String>,
}

/// Settle a payment: submit its authorization and answer once the transfer is in a block.
#[utoipa::path(
    post,
    path = "/x402/settle",
    operation_id = "x402_settle",
    tag = "x402",
    request_body(content = Object, content_type = "application/json", description = "`{x402Version: 2, paymentPayload, paymentRequirements}`"),
    responses(
        (status = 200, description = "Settled or not, and why; `settlement_pending` when the transfer is not in a block by the deadline", body = SettleResponse),
        (status = 400, description = "`invalid_request`: not a v2 settle request", body = crate::error::ErrorBody),
        (status = 503, description = "`unavailable`: the database or the chain did not answer; retry", body = crate::error::ErrorBody),
    )
)]
// An axum handler's arguments are its extractors: each is one thing the settle needs.
#[allow(clippy::too_many_arguments)]
pub async fn settle(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    Extension(merchant): Extension<MerchantId>,
    Extension(Deadline(deadline)): Extension<Deadline>,
    Extension(prechecked): Extension<Prechecked>,
    phases: Phases,
    mut tx: Tx,
    crate::extract::JsonBody(request): crate::extract::JsonBody<Request>,
) -> Result<Response, ApiError> {
    let mut answer = Answer {
        network: request.payment_payload.accepted.network.to_string(),
        payer: None,
        charged: None,
    };
    let Some(signed) = Signed::of(&request) else {
        let why =
            "the payload is neither an EIP-3009 nor a Permit2 authorization with its signature";
        return Ok(json(answer.failure("unsupported_payload_type", why, None)));
    };
    answer.payer = Some(signed.payer().to_checksum(None));
    let network = request.payment_requirements.network.to_string();
    let Some(chain) = exact_evm::served_chain(&chains, &network) else {
        let why = format!("{network} is not served here");
        return Ok(json(answer.failure("invalid_network", why, None)));
    };
    let Ok(asset) = request.payment_requirements.asset.parse::<Address>() else {
        let why = "the asset is not an address";
        return Ok(json(answer.failure("invalid_exact_evm_payload", why, None)));
    };
    let Some(key) = signed.key(chain, asset) else {
        let why = "the nonce is not a decimal integer";
        return Ok(json(answer.failure("invalid_exact_evm_payload", why, None)));
    };
    if let Signed::Permit2(permit) = &signed
        && request.payment_requirements.scheme == "upto"
    {
        let charge = request.payment_requirements.amount.clone();
        let ceiling = &permit.permit2_authorization.permitted.amount;
        match (charge.parse::<U256>(), ceiling.parse::<U256>()) {
            (Ok(charge), Ok(ceiling)) if charge > ceiling || charge.is_zero() => {
                // Checked first, as the reference checks it: a bad permit is refused for what is
                // wrong with it whatever it is asked to charge.
                if let Checks::Permit2(Err(refused)) = prechecked.take()? {
                    return Ok(json(answer.failure_of(refused)));
                }
                if charge.is_zero() {
                    // Nothing to move: the permit stays unspent, as the reference leaves it.
                    answer.charged = Some("0".to_owned());
                    return Ok(json(answer.success(String::new())));
                }
                let why = format!("the charge {charge} is above the permitted {ceiling}");
                let reason = "invalid_upto_evm_payload_settlement_exceeds_amount";
                return Ok(json(answer.failure(reason, why, None)));
            }
            (Ok(_), Ok(_)) => answer.charged = Some(charge),
            _ => {
                let why = "the charge or the permitted amount is not a decimal integer";
                return Ok(json(answer.failure("invalid_exact_evm_payload", why, None)));
            }
        }
    }
    let fingerprint = signed.fingerprint(asset, &request);
    let success_key = phases.key().map(|k| format!("{}/{k}", merchant.as_str()));

    let held = if phases.recovery_point() == Some(STORED) {
        find(&mut tx, &key)
            .await?
            .ok_or_else(|| ApiError::internal("the recovery point says the payment is stored"))?
    } else {
        match store(
            &mut tx,
            &prechecked,
            &merchant,
            &request,
            &signed,
            &key,
            &fingerprint,
        )
        .await?
        {
            Ok(held) => held,
            Err(refused) => return Ok(json(answer.failure_of(refused))),
        }
    };
    let used = signed.reasons().nonce_used;
    if held.merchant_id != merchant.as_str() || held.fingerprint != fingerprint {
        let why = "this payer's nonce is held here for another payment";
        return Ok(json(answer.failure(used, why, None)));
    }
    if let Some(paid_by) = &held.success_tx
        && (success_key.is_none() || held.success_key != success_key)
    {
        let why = "this payment was settled already, and that settle was answered success";
        return Ok(json(answer.failure(used, why, Some(paid_by.clone()))));
    }
    // What is stored stays: the relayer sees it now, and a retry of this key resumes here.
    let phase = phases.commit(tx, STORED).await?;
    let until = deadline.checked_sub(ANSWER_MARGIN).unwrap_or(deadline);
    let outcome = await_transfer(&pool, &chains, &key, &held, signed.reasons(), until).await?;
    match outcome {
        Transfer::Mined(hash) => {
            let mut tx = phase.resume().await?;
            let response = match claim_success(&mut tx, &key, &hash, success_key.as_deref()).await?
            {
                Claimed::Won(hash) => answer.success(hash),
                Claimed::Lost(paid_by) => {
                    let why =
                        "this payment is settled, and another settle of it was answered success";
                    answer.failure(used, why, Some(paid_by))
                }
            };
            Ok(json(response))
        }
        Transfer::Failed { reason, message } => Ok(json(answer.failure(reason, message, None))),
        Transfer::Pending { hash, why } => Ok(provisional(json(answer.failure(
            "settlement_pending",
            why,
            hash,
        )))),
    }
}

fn json(response: SettleResponse) -> Response {
    Json(response).into_response()
}

/// What [`check_first`] needs: where it reads the body within the same limits as the idempotency
/// layer, the chains it asks, and the pool for the token's reading.
#[derive(Clone)]
pub struct CheckFirst {
    pub pool: Pool,
    pub chains: Chains,
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
}

/// Checks a settle's payment before the idempotency layer claims its key and opens the request's
/// transaction: the checks ask the chain (its time, the token, a simulation), which takes long
/// under load, and a connection of the request pool held meanwhile is one a burst of settles runs
/// out of (`docs/x402.md`, "Settle"). Read-only; what they say waits in [`Prechecked`] for the
/// payment's first store, and a replay answered from its key never reads it.
pub async fn check_first(
    State(state): State<CheckFirst>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let deadline = Deadline::of(&request, state.request_timeout);
    let read = crate::extract::whole_body(
        request,
        state.max_body_bytes,
        deadline,
        state.request_timeout,
    )
    .await;
    let (mut request, body) = match read {
        Ok(read) => read,
        Err(refused) => return refused.into_response(),
    };
    let prechecked = Prechecked::default();
    // A body that is no settle is left to the handler, which says why.
    if let Ok(settle) = serde_json::from_slice::<Request>(&body)
        && let Some(signed) = Signed::of(&settle)
    {
        let checks = checks(&state.pool, &state.chains, &settle, &signed).await;
        *prechecked.0.lock().expect("never poisoned") = Some(checks);
    }
    request.extensions_mut().insert(prechecked);
    next.run(request).await
}

/// A settle's checks as [`check_first`] made them: for every body the handler reads as a payment
/// (the same type, parsed the same way), so the handler finds them when it needs them.
#[derive(Clone, Default)]
pub struct Prechecked(std::sync::Arc<std::sync::Mutex<Option<Result<Checks, ApiError>>>>);

impl Prechecked {
    /// What the checks said, or why they could not be made (a chain that did not answer); once.
    fn take(&self) -> Result<Checks, ApiError> {
        self.0
            .lock()
            .expect("never poisoned")
            .take()
            .unwrap_or_else(|| Err(ApiError::internal("the settle's payment was not checked")))
    }
}

/// What the checks of a payment said: what settling it submits, or the reference's refusal.
enum Checks {
    Eip3009(Result<Checked, exact_evm::VerifyResponse>),
    /// Checked at its ceiling, for `upto` (`upto_at_ceiling`).
    Permit2(Result<CheckedPermit, exact_evm::VerifyResponse>),
}

async fn checks(
    pool: &Pool,
    chains: &Chains,
    request: &Request,
    signed: &Signed,
) -> Result<Checks, ApiError> {
    Ok(match signed {
        Signed::Eip3009(_) => Checks::Eip3009(exact_evm::check(pool, chains, request).await?),
        Signed::Permit2(_) => {
            let at_ceiling = upto_at_ceiling(request);
            Checks::Permit2(exact_permit2::check(chains, &at_ceiling).await?)
        }
    })
}

/// A payment as the client signed it: an EIP-3009 authorization, or a Permit2 permit for x402's
/// exact proxy (`exact_permit2`).
enum Signed {
    Eip3009(Eip3009Payload),
    Permit2(Permit2Payload),
}

/// The reference's reasons for a payment whose nonce is spent, or whose time ran out.
#[derive(Clone, Copy)]
struct Reasons {
    nonce_used: &'static str,
    expired: &'static str,
    /// Neither: the transfer could not be made.
    failed: &'static str,
}

impl Signed {
    /// The payload, by its shape as the reference routes it.
    fn of(request: &Request) -> Option<Self> {
        if exact_permit2::is_permit2(request) {
            serde_json::from_value(request.payment_payload.payload.clone())
                .ok()
                .map(Self::Permit2)
        } else {
            exact_evm::eip3009_payload(request).map(Self::Eip3009)
        }
    }

    fn payer(&self) -> Address {
        match self {
            Self::Eip3009(p) => p.authorization.from,
            Self::Permit2(p) => p.permit2_authorization.from,
        }
    }

    /// The payment's key: what spends its nonce once (the token for EIP-3009; Permit2, whose
    /// nonces are the owner's across every token, for a permit), the payer and the nonce. `None`
    /// when a permit's nonce is not a number.
    fn key(&self, chain: String, asset: Address) -> Option<PaymentKey> {
        let (spender, nonce) = match self {
            Self::Eip3009(p) => (asset, p.authorization.nonce),
            Self::Permit2(p) => (
                PERMIT2,
                B256::from(p.permit2_authorization.nonce.parse::<U256>().ok()?),
            ),
        };
        Some(PaymentKey {
            chain,
            token: spender,
            authorizer: self.payer(),
            nonce,
        })
    }

    /// What the payment says, hashed: the same nonce with another payload is another payment.
    /// The requirements' amount is part of it: for `upto`, what the settle charges.
    fn fingerprint(&self, asset: Address, request: &Request) -> Vec<u8> {
        let network = request.payment_requirements.network.to_string();
        let required = &request.payment_requirements.amount;
        let canonical = match self {
            Self::Eip3009(p) => {
                let a = &p.authorization;
                serde_json::json!({
                    "network": network,
                    "asset": asset.to_checksum(None),
                    "from": a.from.to_checksum(None),
                    "to": a.to.to_checksum(None),
                    "value": a.value,
                    "validAfter": a.valid_after,
                    "validBefore": a.valid_before,
                    "nonce": a.nonce.to_string(),
                    "signature": p.signature.to_ascii_lowercase(),
                })
            }
            Self::Permit2(p) => {
                let a = &p.permit2_authorization;
                let mut canonical = serde_json::json!({
                    "network": network,
                    "asset": asset.to_checksum(None),
                    "required": required,
                    "permit2": {
                        "from": a.from.to_checksum(None),
                        "token": a.permitted.token.to_checksum(None),
                        "amount": a.permitted.amount,
                        "spender": a.spender.to_checksum(None),
                        "nonce": a.nonce,
                        "deadline": a.deadline,
                        "to": a.witness.to.to_checksum(None),
                        "facilitator": a.witness.facilitator.map(|f| f.to_checksum(None)),
                        "validAfter": a.witness.valid_after,
                    },
                    "signature": p.signature.to_ascii_lowercase(),
                });
                // Only when sent, so a payment without it hashes as it always has.
                if let Some(sponsored) = eip2612_gas_sponsoring::of(request) {
                    canonical["eip2612"] = sponsored.canonical();
                }
                canonical
            }
        };
        Sha256::digest(canonical.to_string().as_bytes()).to_vec()
    }

    fn reasons(&self) -> Reasons {
        match self {
            Self::Eip3009(_) => Reasons {
                nonce_used: "invalid_exact_evm_nonce_already_used",
                expired: "invalid_exact_evm_payload_authorization_valid_before",
                failed: "invalid_exact_evm_transaction_failed",
            },
            Self::Permit2(p) => Reasons {
                nonce_used: "permit2_invalid_nonce",
                expired: "permit2_deadline_expired",
                failed: if p.permit2_authorization.witness.facilitator.is_some() {
                    "invalid_upto_evm_transaction_failed"
                } else {
                    "invalid_exact_evm_transaction_failed"
                },
            },
        }
    }
}

/// The request as an `upto` payment is checked at settle: against its ceiling, the permit's amount,
/// since the requirements' amount is then what is charged (as the reference checks it).
fn upto_at_ceiling(request: &Request) -> Request {
    let mut at_ceiling = request.clone();
    if at_ceiling.payment_requirements.scheme == "upto"
        && let Some(Signed::Permit2(permit)) = Signed::of(request)
    {
        at_ceiling.payment_requirements.amount = permit.permit2_authorization.permitted.amount;
    }
    at_ceiling
}

/// A payment that passed every check: what its intent is and what settling it submits.
struct Payable {
    chain: String,
    chain_id: u64,
    token: Address,
    /// What it moves.
    amount: U256,
    /// For `upto`, the most the payer allowed.
    ceiling: Option<U256>,
    from: Address,
    to: Address,
    /// The first second of chain time it can no longer be paid in.
    ends_at: u64,
    nonce: B256,
    paid_by: PaidBy,
    dedupe_key: String,
    target: Address,
    calldata: Bytes,
    /// The one relayer key that may send it, when the call checks its sender.
    sender: Option<Address>,
    /// The payer's wallet's deployment, sent first (ERC-6492).
    deployment: Option<erc6492::Deployment>,
}

impl Payable {
    fn of_eip3009(checked: Checked) -> Result<Self, String> {
        let a = &checked.authorization;
        Ok(Self {
            chain_id: a.chain_id,
            token: a.token,
            amount: a.value,
            ceiling: None,
            from: a.from,
            to: a.to,
            ends_at: a.valid_before,
            nonce: a.nonce,
            paid_by: PaidBy::Authorization {
                payer: Some(intent_address(a.from, "from")?),
            },
            dedupe_key: eip3009::dedupe_key(a.token, a.from, a.nonce),
            target: a.token,
            calldata: a.calldata_for(&checked.proof),
            sender: None,
            deployment: checked.deployment,
            chain: checked.chain,
        })
    }

    /// `charge`: what the requirements ask; for `upto`, at most the permit's amount (the settle
    /// checked it), for `exact`, the permit's amount (the check did).
    fn of_permit2(checked: CheckedPermit, charge: Option<U256>) -> Result<Self, String> {
        let p = &checked.permit;
        let charged = match p.facilitator {
            None => p.amount,
            Some(_) => charge.ok_or("the charge is not a decimal integer")?,
        };
        let nonce = B256::from(p.nonce);
        // Permit2's deadline is the last second it pays in.
        let ends_at = u64::try_from(p.deadline)
            .ok()
            .and_then(|last| last.checked_add(1))
            .ok_or_else(|| format!("deadline {} is no time we can keep", p.deadline))?;
        Ok(Self {
            chain_id: p.chain_id,
            token: p.token,
            amount: charged,
            ceiling: p.facilitator.map(|_| p.amount),
            from: p.owner,
            to: p.to,
            ends_at,
            nonce,
            paid_by: PaidBy::Permit2 {
                payer: Some(intent_address(p.owner, "from")?),
            },
            dedupe_key: eip3009::dedupe_key(PERMIT2, p.owner, nonce),
            target: p.spender(),
            sender: p.facilitator,
            deployment: None,
            calldata: p.settle_calldata(charged, checked.signature.clone()),
            chain: checked.chain,
        })
    }
}

fn intent_address(raw: Address, what: &str) -> Result<IntentAddress, String> {
    IntentAddress::parse(&raw.to_checksum(None)).map_err(|e| format!("{what}: {e}"))
}

/// The payment stored under `key`, if any.
pub async fn find(conn: &mut PgConnection, key: &PaymentKey) -> Result<Option<Held>, sqlx::Error> {
    sqlx::query_as!(
        Held,
        r#"SELECT merchant_id, intent_id, fingerprint, success_tx, success_key FROM x402_payments
            WHERE chain = $1 AND token = $2 AND authorizer = $3 AND nonce = $4"#,
        key.chain,
        key.token.to_checksum(None),
        key.authorizer.to_checksum(None),
        key.nonce.as_slice(),
    )
    .fetch_optional(conn)
    .await
}

/// The payment under `key`: the one stored already, or else, if it passes every check, stored now
/// as a `processing` intent with its submission queued, in `tx`. `Err` is the check that failed.
async fn store(
    tx: &mut PgConnection,
    prechecked: &Prechecked,
    merchant: &MerchantId,
    request: &Request,
    signed: &Signed,
    key: &PaymentKey,
    fingerprint: &[u8],
) -> Result<Result<Held, exact_evm::VerifyResponse>, ApiError> {
    if let Some(held) = find(tx, key).await? {
        return Ok(Ok(held));
    }
    let checked = match prechecked.take()? {
        Checks::Eip3009(checked) => checked.map(Payable::of_eip3009),
        Checks::Permit2(checked) => {
            let charge = request.payment_requirements.amount.parse::<U256>().ok();
            checked.map(|checked| Payable::of_permit2(checked, charge))
        }
    };
    let payable = match checked {
        Ok(Ok(payable)) => payable,
        Ok(Err(why)) => {
            let payer = Some(signed.payer());
            return Ok(Err(exact_evm::VerifyResponse::invalid(
                "invalid_exact_evm_payload",
                payer,
                why,
            )));
        }
        Err(refused) => {
            // A concurrent settle of the same payment may have committed since the look above.
            return Ok(match find(tx, key).await? {
                Some(held) => Ok(held),
                None => Err(refused),
            });
        }
    };
    // Everything the intent needs is read before anything is written: a payment this server
    // cannot keep as an intent is refused, never half stored.
    let new = match new_intent(&payable, request) {
        Ok(new) => new,
        Err(why) => {
            let payer = Some(payable.from);
            return Ok(Err(exact_evm::VerifyResponse::invalid(
                "invalid_exact_evm_payload",
                payer,
                why,
            )));
        }
    };
    let intent_id = IntentId::generate();
    let network = request.payment_requirements.network.to_string();
    let inserted = sqlx::query_as!(
        Held,
        r#"INSERT INTO x402_payments (chain, token, authorizer, nonce, merchant_id, intent_id, network, fingerprint, asset)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
           ON CONFLICT DO NOTHING
           RETURNING merchant_id, intent_id, fingerprint, success_tx, success_key"#,
        key.chain,
        key.token.to_checksum(None),
        key.authorizer.to_checksum(None),
        key.nonce.as_slice(),
        merchant.as_str(),
        intent_id.as_str(),
        network,
        fingerprint,
        payable.token.to_checksum(None),
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(held) = inserted else {
        // A concurrent settle stored it first: this insert waited for its commit, and now sees it.
        return find(tx, key)
            .await?
            .map(Ok)
            .ok_or_else(|| ApiError::internal("an x402 payment conflicted and is gone"));
    };
    open_intent(tx, merchant, &intent_id, &new, &payable).await?;
    Ok(Ok(held))
}

/// The payment as a payment intent: its requirements as the intent (amount, asset, payTo, the
/// end of its validity as its expiry), its own nonce. `Err` says what cannot be kept so.
fn new_intent(payable: &Payable, request: &Request) -> Result<NewIntent, String> {
    let expires_at = i64::try_from(payable.ends_at)
        .ok()
        .and_then(|at| OffsetDateTime::from_unix_timestamp(at).ok())
        .ok_or_else(|| {
            format!(
                "the validity end {} is no time we can keep",
                payable.ends_at
            )
        })?;
    let resource = request
        .payment_payload
        .resource
        .as_ref()
        .map(|r| r.url.clone());
    let mut pairs = vec![(
        "x402_network",
        request.payment_requirements.network.to_string(),
    )];
    pairs.extend(resource.map(|url| ("x402_resource", url)));
    pairs.extend(
        payable
            .ceiling
            .map(|c| ("x402_upto_ceiling", c.to_string())),
    );
    Ok(NewIntent {
        priced: Priced::InToken {
            chain: Chain::parse(&payable.chain)?,
            token: intent_address(payable.token, "asset")?,
            amount: Amount::parse(&payable.amount.to_string())
                .map_err(|e| format!("value: {e}"))?,
            paid_by: payable.paid_by,
        },
        payee: intent_address(payable.to, "payTo")?,
        expires: Expires::At(expires_at),
        metadata: Metadata::of_ours(pairs.iter().map(|(k, v)| (*k, v.as_str()))),
        nonce: Some(payable.nonce.0),
    })
}

/// Stores `new` as a payment intent of the merchant, `processing` at once (its payment is
/// signed), and queues its submission.
async fn open_intent(
    tx: &mut PgConnection,
    merchant: &MerchantId,
    id: &IntentId,
    new: &NewIntent,
    payable: &Payable,
) -> Result<(), ApiError> {
    let actor = Actor::Merchant(merchant.as_str().to_owned());
    repo::insert(tx, merchant, id, new, None)
        .await?
        .ok_or_else(|| {
            ApiError::internal("an x402 payment's intent has no order terms to go stale")
        })?;
    repo::apply_paid(
        tx,
        merchant.as_str(),
        id.as_str(),
        Action::Confirm,
        &actor,
        None,
    )
    .await
    .map_err(|e| match e {
        TransitionError::Database(e) => ApiError::from(e),
        other => ApiError::internal(&format!("a new x402 intent cannot be confirmed: {other}")),
    })?;
    let after = match &payable.deployment {
        Some(deployment) => {
            let first =
                super::erc6492::submission(id.as_str(), payable.chain_id, payable.from, deployment);
            Some(outbox::queue(tx, &first).await?)
        }
        None => None,
    };
    let submission = NewSubmission {
        kind: crate::intents::payment::KIND,
        subject: id.as_str(),
        chain_id: payable.chain_id,
        dedupe_key: payable.dedupe_key.clone(),
        target: payable.target,
        calldata: payable.calldata.clone(),
        sender: payable.sender,
        after,
    };
    outbox::queue(tx, &submission).await?;
    Ok(())
}

/// Where a stored payment's transfer is.
enum Transfer {
    /// In a block, by this transaction (not necessarily confirmed yet).
    Mined(String),
    /// It will never be made: the reason to answer.
    Failed {
        reason: &'static str,
        message: String,
    },
    /// Not in a block by the deadline: the last transaction sent for it, if any, and why it waits.
    Pending { hash: Option<String>, why: String },
}

/// Waits until the payment's transfer is in a block, or the payment ended otherwise, or `until`.
/// It wakes when its submission is sent (the relayer's notification) and when a block includes a
/// transaction of it (`rails::inclusion`), and looks again every second in case a
/// notification was missed.
async fn await_transfer(
    pool: &Pool,
    chains: &Chains,
    key: &PaymentKey,
    held: &Held,
    reasons: Reasons,
    until: Instant,
) -> Result<Transfer, ApiError> {
    use crate::intents::state::IntentState;
    let (endpoint, node) = chains
        .get(&key.chain)
        .ok_or_else(|| ApiError::internal("the settle checked the chain"))?;
    let dedupe_key = eip3009::dedupe_key(key.token, key.authorizer, key.nonce);
    let submission = {
        let mut conn = pool.acquire().await?;
        crate::rails::outbox::find(&mut conn, endpoint.id, &dedupe_key).await?
    };
    let mut waiting = Waiting {
        chains,
        submission,
        notify: submission.map_or_else(Default::default, |id| chains.outcomes.waiter(id)),
        watched: Vec::new(),
    };
    let mut looked_at = Instant::now();
    loop {
        // Registered before reading, so a notification between the read and the wait counts.
        let notify = waiting.notify.clone();
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (now, tx_hashes) = {
            let mut conn = pool.acquire().await?;
            let now =
                crate::intents::repo::payment_state(&mut conn, &held.merchant_id, &held.intent_id)
                    .await?
                    .ok_or_else(|| ApiError::internal("a held x402 payment without its intent"))?;
            let sent = match submission {
                Some(id) => crate::rails::outbox::status(&mut conn, id).await?,
                None => None,
            };
            (now, sent.map(|s| s.tx_hashes).unwrap_or_default())
        };

        match now.state {
            IntentState::Succeeded => {
                if let Some(hash) = now.settled_by {
                    return Ok(Transfer::Mined(hash));
                }
            }
            IntentState::Failed | IntentState::Canceled => {
                let failure = now.failure_reason.unwrap_or_default();
                let reason = match FailureReason::parse(&failure) {
                    Some(FailureReason::AuthorizationExpired) => reasons.expired,
                    Some(
                        FailureReason::NonceUsedOtherwise | FailureReason::AuthorizationCanceled,
                    ) => reasons.nonce_used,
                    // Expired while the token refused it: the transfer could not be made.
                    None => reasons.failed,
                };
                let message = format!("the payment will not be made: {failure}");
                return Ok(Transfer::Failed { reason, message });
            }
            _ => {}
        }
        // A receipt is asked for a transaction the first time it is seen (it may be mined
        // already), when a block was seen to include it, and once a second.
        let look_again = looked_at.elapsed() >= LOOK_AGAIN;
        if look_again {
            looked_at = Instant::now();
        }
        for hash in tx_hashes.iter().rev() {
            let Ok(parsed) = hash.parse::<B256>() else {
                continue;
            };
            let new = !waiting.watched.contains(&parsed);
            if new {
                chains.inclusions.watch(parsed, &waiting.notify);
                waiting.watched.push(parsed);
            }
            let seen = chains.inclusions.seen(parsed).is_some();
            if !(new || seen || look_again) {
                continue;
            }
            let receipt = node.get_transaction_receipt(parsed).await.map_err(|e| {
                ApiError::ChainUnavailable(format!(
                    "{} did not answer for the payment's transaction {hash} ({e}); the payment is stored and will be made: settle again to learn it",
                    key.chain
                ))
            })?;
            match receipt {
                Some(receipt) if receipt.status() => return Ok(Transfer::Mined(hash.clone())),
                Some(_) => {}
                None => chains.inclusions.unsee(parsed),
            }
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let hash = tx_hashes.last().cloned();
            let why = match (&hash, now.pending_reason) {
                (_, Some(held_for)) => format!(
                    "the token refuses the transfer for now ({held_for}); it is tried again until validBefore"
                ),
                (Some(hash), None) => format!("the transfer {hash} is sent and not in a block yet"),
                (None, None) => "the transfer is queued and not sent yet".to_owned(),
            };
            return Ok(Transfer::Pending { hash, why });
        }
        let _ = tokio::time::timeout(left.min(LOOK_AGAIN), notified).await;
    }
}

/// What a waiting settle registered to be woken by; dropped however the wait ends (its answer,
/// an error, or the deadline cutting it short), it unregisters.
struct Waiting<'a> {
    chains: &'a Chains,
    submission: Option<uuid::Uuid>,
    notify: std::sync::Arc<tokio::sync::Notify>,
    /// The transactions it waits for a block of.
    watched: Vec<B256>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.chains.inclusions.forget(self.watched.drain(..));
        if let Some(id) = self.submission {
            self.chains.outcomes.forget(id, &self.notify);
        }
    }
}

enum Claimed {
    Won(String),
    /// Another settle of it was answered success, with this transaction.
    Lost(String),
}

/// Claims the payment's one `success: true` for this settle: the first to claim it, or a retry
/// with the Idempotency-Key that claimed it (`success_key`), gets it, with the transaction it
/// claimed; everyone else hears that transaction.
async fn claim_success(
    tx: &mut Tx,
    key: &PaymentKey,
    hash: &str,
    success_key: Option<&str>,
) -> Result<Claimed, sqlx::Error> {
    let won = sqlx::query_scalar!(
        r#"UPDATE x402_payments
              SET succeeded_at = coalesce(succeeded_at, now()),
                  success_tx = coalesce(success_tx, $5),
                  success_key = CASE WHEN succeeded_at IS NULL THEN $6 ELSE success_key END
            WHERE chain = $1 AND token = $2 AND authorizer = $3 AND nonce = $4
              AND (succeeded_at IS NULL OR success_key = $6)
        RETURNING success_tx AS "success_tx!""#,
        key.chain,
        key.token.to_checksum(None),
        key.authorizer.to_checksum(None),
        key.nonce.as_slice(),
        hash,
        success_key,
    )
    .fetch_optional(&mut **tx)
    .await?;
    if let Some(hash) = won {
        return Ok(Claimed::Won(hash));
    }
    let paid_by = find(tx, key).await?.and_then(|held| held.success_tx);
    Ok(Claimed::Lost(paid_by.unwrap_or_else(|| hash.to_owned())))
}
