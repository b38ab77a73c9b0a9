//! Paying an intent by EIP-3009 authorization: which intents may be paid, by whom and with which
//! of an order's options, the document the payer signs, the confirm that checks the signature,
//! chooses the option and queues the submission in the caller's transaction. The routes and the
//! checkout page call these, so each rule is in one place (`docs/settlement.md`); what any
//! EIP-3009 authorization shares is `rails::eip3009`.

use serde::Deserialize;
use sqlx::PgConnection;
use utoipa::{IntoParams, ToSchema};

use crate::{
    auth::MerchantId,
    error::ApiError,
    intents::payment::KIND,
    intents::{
        domain::{self, Address, IntentId, PaymentMethod},
        order::PaymentOption,
        repo::{self, Choice, PaymentIntent, TransitionError},
        state::{Action, Actor, IntentState},
    },
    rails::{
        Chains,
        eip3009::{
            AuthorizationDocument, Terms, authorization_for, authorizer_proof, queue_authorization,
            served, valid_before,
        },
        evm::{
            authorization::{Authorization, PayerProof},
            permit2::ProxyPermit,
        },
    },
};
use alloy::primitives::Bytes;

use super::permit2;

/// Who pays and how, where the intent leaves it open: `GET …/authorization`'s parameters.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct Choose {
    /// The order's option to pay with (`payment_options[].id`); required for an order, absent
    /// otherwise.
    pub option: Option<String>,
    /// Who signs: required unless the intent names its payer (then it must match).
    pub payer: Option<String>,
}

/// A confirm: the payer's signature of the authorization, and what it chose.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PayRequest {
    /// The order's option the payer signed for; required for an order, absent otherwise.
    #[serde(default)]
    #[schema(example = "po_4c1d6e0f9a2b3c4d5e6f7a8b")]
    pub option: Option<String>,
    /// Who signed: required unless the intent names its payer (then it must match).
    #[serde(default)]
    #[schema(pattern = "^0x[0-9a-fA-F]{40}$")]
    pub payer: Option<String>,
    /// `0x` + 130 hex digits: r, s, v (27/28 or 0/1), s in the lower half (EIP-2).
    #[schema(pattern = "^0x[0-9a-fA-F]{130}$")]
    pub signature: String,
    /// A payment by Permit2 only: the payer's signature of the document's `token_permit` (the
    /// token's EIP-2612 permit for Permit2), submitted with the payment instead of an approval.
    #[serde(default)]
    #[schema(pattern = "^0x[0-9a-fA-F]{130}$")]
    pub token_permit_signature: Option<String>,
}

impl PayRequest {
    fn choice(&self) -> Choose {
        Choose {
            option: self.option.clone(),
            payer: self.payer.clone(),
        }
    }
}

/// The document the payer signs to pay the merchant's intent `raw_id` as `choose` says, if it
/// can be paid now: an EIP-3009 authorization, or a Permit2 permit (`super::permit2`).
pub async fn authorization(
    conn: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    raw_id: &str,
    choose: &Choose,
) -> Result<AuthorizationDocument, ApiError> {
    let intent = payable(conn, merchant, raw_id).await?;
    let payment = Payment::of(chains, &intent, choose)?;
    let terms = payment.terms(&intent);
    Ok(match payment.method {
        PaymentMethod::Permit2 => {
            permit2::document(chains, terms.chain, &permit2::permit(chains, &terms)?).await?
        }
        _ => AuthorizationDocument::of(&authorization_for(conn, chains, &terms).await?.0),
    })
}

/// Confirms the intent with the payer's signature of its authorization: `created` → `processing`,
/// the order's option chosen and the submission queued, all in `tx`, or nothing. `actor` is who
/// sent it (the merchant, or the payer through the checkout page).
pub async fn confirm(
    tx: &mut PgConnection,
    chains: &Chains,
    merchant: &MerchantId,
    raw_id: &str,
    request: &PayRequest,
    actor: &Actor,
) -> Result<PaymentIntent, ApiError> {
    let intent = payable(tx, merchant, raw_id).await?;
    let payment = Payment::of(chains, &intent, &request.choice())?;
    let terms = payment.terms(&intent);
    let signed = match payment.method {
        PaymentMethod::Permit2 => {
            let mut permit = permit2::permit(chains, &terms)?;
            if let Some(raw) = &request.token_permit_signature {
                permit.token_permit = Some(permit2::token_permit(&permit, raw)?);
            }
            let signature =
                permit2::signed(chains, terms.chain, &permit, &request.signature).await?;
            Signed::Permit2(permit, signature)
        }
        _ if request.token_permit_signature.is_some() => {
            return Err(ApiError::InvalidRequest(format!(
                "token_permit_signature: intent {} is not paid by Permit2, so it takes no token permit",
                intent.id
            )));
        }
        _ => {
            let (authorization, token) = authorization_for(tx, chains, &terms).await?;
            let proof = authorizer_proof(
                chains,
                terms.chain,
                &authorization,
                &token,
                &request.signature,
                "payer",
            )
            .await?;
            Signed::Eip3009(authorization, proof)
        }
    };
    match &payment.option {
        Some(option) => {
            let choice = repo::choose_option(
                tx,
                merchant.as_str(),
                &intent.id,
                option,
                Some(&payment.payer),
            )
            .await?;
            if let Choice::Taken { state, .. } = choice {
                return Err(not_payable(&intent.id, state, true));
            }
        }
        None if intent.payer.is_none() => {
            repo::name_payer(tx, merchant.as_str(), &intent.id, &payment.payer).await?;
        }
        None => {}
    }
    let confirmed = repo::apply_paid(
        tx,
        merchant.as_str(),
        &intent.id,
        Action::Confirm,
        actor,
        None,
    )
    .await
    .map_err(|e| match e {
        // Another confirm moved it meanwhile (it waited on the row lock).
        TransitionError::Forbidden { from, .. } => {
            not_payable(&intent.id, from, intent.currency.is_some())
        }
        TransitionError::NotFound => ApiError::NotFound(format!("no payment intent {}", intent.id)),
        TransitionError::Database(e) => e.into(),
    })?;
    match &signed {
        Signed::Eip3009(authorization, proof) => {
            queue_authorization(tx, KIND, &intent.id, authorization, proof).await?;
        }
        Signed::Permit2(permit, signature) => {
            permit2::queue(tx, &intent.id, permit, signature).await?;
        }
    }
    Ok(confirmed)
}

/// What the payer signed, checked.
enum Signed {
    Eip3009(Authorization, PayerProof),
    Permit2(ProxyPermit, Bytes),
}

/// The merchant's intent `raw_id`, if it can be paid now: it exists and is `created`.
async fn payable(
    conn: &mut PgConnection,
    merchant: &MerchantId,
    raw_id: &str,
) -> Result<PaymentIntent, ApiError> {
    let not_found = || ApiError::NotFound("no payment intent with that id".to_owned());
    let id = IntentId::parse(raw_id).ok_or_else(not_found)?;
    let intent = repo::find(conn, merchant, &id)
        .await?
        .ok_or_else(not_found)?;
    if intent.state != IntentState::Created {
        return Err(not_payable(
            &intent.id,
            intent.state,
            intent.currency.is_some(),
        ));
    }
    Ok(intent)
}

/// Why an intent in `state` cannot be paid: an order being paid already is a payment in progress.
fn not_payable(id: &str, state: IntentState, is_order: bool) -> ApiError {
    if is_order && state == IntentState::Processing {
        ApiError::PaymentInProgress(format!(
            "payment intent {id} is being paid by its selected_option; no other payment of it is taken"
        ))
    } else {
        ApiError::InvalidStateTransition(format!(
            "payment intent {id}: a {state} payment intent cannot be paid"
        ))
    }
}

/// How a `created` intent is paid by a signature: the order's option chosen, if it is one, what
/// the payer signs, and who signs.
struct Payment {
    option: Option<PaymentOption>,
    /// `authorization` (EIP-3009) or `permit2`.
    method: PaymentMethod,
    payer: Address,
    /// `payer`, EIP-55, as the authorization's terms name it.
    from: String,
}

impl Payment {
    /// What `choose` makes of the intent: 400 naming the field for an option or payer it cannot
    /// be paid with, 422 if its chain is not settled here.
    fn of(chains: &Chains, intent: &PaymentIntent, choose: &Choose) -> Result<Self, ApiError> {
        let invalid =
            |field: &str, why: String| ApiError::InvalidRequest(format!("{field}: {why}"));
        let option = match (&choose.option, intent.currency.is_some()) {
            (None, false) => None,
            (Some(_), false) => {
                return Err(invalid(
                    "option",
                    format!(
                        "payment intent {} is priced in token units and has no payment_options",
                        intent.id
                    ),
                ));
            }
            (None, true) => {
                let ids: Vec<&str> = intent
                    .payment_options
                    .iter()
                    .map(|o| o.id.as_str())
                    .collect();
                return Err(invalid(
                    "option",
                    format!(
                        "required for an order: one of its payment_options ({})",
                        ids.join(", ")
                    ),
                ));
            }
            (Some(raw), true) => {
                let option = intent
                    .payment_options
                    .iter()
                    .find(|o| o.id == *raw)
                    .ok_or_else(|| {
                        invalid(
                            "option",
                            format!("payment intent {} has no option {raw:?}", intent.id),
                        )
                    })?;
                if option.payment_method == PaymentMethod::DepositAddress {
                    return Err(invalid(
                        "option",
                        format!(
                            "{} is paid by transfers to its deposit_address, not by an authorization",
                            option.id
                        ),
                    ));
                }
                Some(option.clone())
            }
        };
        let method = match (&option, intent.payment_method) {
            (Some(option), _) => option.payment_method,
            (None, Some(method @ (PaymentMethod::Authorization | PaymentMethod::Permit2))) => {
                method
            }
            (None, _) => {
                return Err(ApiError::InvalidRequest(format!(
                    "payment intent {}: it is paid by transfers to its deposit_address, not by an authorization",
                    intent.id
                )));
            }
        };
        let given = choose
            .payer
            .as_deref()
            .map(|raw| Address::parse(raw).map_err(|why| invalid("payer", why)))
            .transpose()?;
        let named = intent
            .payer
            .as_deref()
            .map(|raw| {
                Address::parse(raw)
                    .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored payer: {e}")))
            })
            .transpose()?;
        let payer = match (given, named) {
            (Some(given), Some(named)) if given != named => {
                return Err(invalid(
                    "payer",
                    format!(
                        "payment intent {} is paid by {named}, not {given}",
                        intent.id
                    ),
                ));
            }
            (_, Some(named)) => named,
            (Some(given), None) => given,
            (None, None) => {
                return Err(invalid(
                    "payer",
                    "required: the address that signs the authorization".to_owned(),
                ));
            }
        };
        let payment = Self {
            option,
            method,
            payer,
            from: payer.to_checksum(),
        };
        served(
            chains,
            payment.chain(intent),
            &format!("payment intent {}", intent.id),
        )?;
        Ok(payment)
    }

    /// The chain it is paid on: the option's, or the intent's.
    fn chain<'a>(&'a self, intent: &'a PaymentIntent) -> &'a str {
        match &self.option {
            Some(option) => &option.chain,
            None => intent.chain.as_deref().unwrap_or_default(),
        }
    }

    /// What its authorization moves: the option's (or the intent's) token and base-unit amount,
    /// from the payer to the merchant, under the intent's nonce, until the intent expires.
    fn terms<'a>(&'a self, intent: &'a PaymentIntent) -> Terms<'a> {
        let (token, value) = match &self.option {
            Some(option) => (option.token.as_str(), option.amount.as_str()),
            None => (
                intent.token.as_deref().unwrap_or_default(),
                intent.amount.as_str(),
            ),
        };
        Terms {
            chain: self.chain(intent),
            token,
            from: &self.from,
            to: &intent.merchant,
            value,
            valid_before: valid_before(intent.expires_at),
            nonce: domain::chain_nonce(&intent.id),
        }
    }
}
