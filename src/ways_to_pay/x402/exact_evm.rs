//! The `exact` scheme on EVM chains: a client's EIP-3009 `transferWithAuthorization`, signed for
//! the resource's requirements. [`verify`] checks it in the reference facilitator's order
//! (`@x402/evm`'s exact facilitator) and answers with its `invalidReason` strings, so a resource
//! server reads our answers as it reads the reference's (`docs/x402.md`, "Verify").

use alloy::{
    eips::BlockNumberOrTag,
    primitives::{Address, B256, U256},
    providers::Provider,
};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use x402_types::proto::v2;

use super::erc6492::Signature;
use crate::{
    config::ChainEndpoint,
    db::Pool,
    error::ApiError,
    rails::{
        Chains, eip3009,
        evm::{
            authorization::{Authorization, PayerProof},
            erc6492,
            token::{self, TokenSupport},
        },
        rpc::{ChainError, Node},
        tokens,
    },
};

/// The requirements a resource server states (v2).
pub type Requirements = v2::PaymentRequirements;
/// A client's payment: the requirements it accepted and the scheme's payload, kept as JSON until
/// the scheme reads it.
pub type Payload = v2::PaymentPayload<Requirements, serde_json::Value>;
/// `POST /x402/verify` and `/x402/settle`: `{x402Version, paymentPayload, paymentRequirements}`.
pub type Request = v2::VerifyRequest<Payload, Requirements>;

/// The `exact` EVM payload by EIP-3009.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Eip3009Payload {
    pub signature: String,
    pub authorization: Eip3009Authorization,
}

/// Integers as decimal strings, as the scheme writes them.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Eip3009Authorization {
    pub from: Address,
    pub to: Address,
    pub value: String,
    pub valid_after: String,
    pub valid_before: String,
    pub nonce: B256,
}

/// `/verify`'s answer, the reference's shape.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    pub is_valid: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid_message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
}

impl VerifyResponse {
    fn valid(payer: Address) -> Self {
        Self {
            is_valid: true,
            invalid_reason: None,
            invalid_message: None,
            payer: Some(payer.to_checksum(None)),
        }
    }

    pub(super) fn invalid(
        reason: &'static str,
        payer: Option<Address>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            is_valid: false,
            invalid_reason: Some(reason),
            invalid_message: Some(message.into()),
            payer: payer.map(|p| p.to_checksum(None)),
        }
    }
}

/// 9999-12-31T23:59:59Z: a later `validBefore` (one in milliseconds, say) is no time we can keep.
pub(super) const LAST_VALID_BEFORE: u64 = 253_402_300_799;

/// The served chain of a CAIP-2 `eip155:<id>` network, as our `evm:<id>`.
pub fn served_chain(chains: &Chains, network: &str) -> Option<String> {
    let id = network.strip_prefix("eip155:")?;
    let name = format!("evm:{id}");
    chains.get(&name).map(|_| name)
}

/// A check's `invalidReason` and what it says.
pub(super) type Refusal = (&'static str, String);

/// The chain a payment is for, checked as both ways of the `exact` scheme check it: the network
/// the client accepted is the required one, and a chain served here. Our name of it and its node,
/// or the reference's reason.
pub(super) fn required_chain<'c>(
    chains: &'c Chains,
    request: &Request,
) -> Result<(String, &'c (ChainEndpoint, Node)), Refusal> {
    let (accepted, required) = (
        &request.payment_payload.accepted.network,
        &request.payment_requirements.network,
    );
    if accepted != required {
        return Err((
            "invalid_exact_evm_network_mismatch",
            format!("accepted {accepted}, required {required}"),
        ));
    }
    let network = required.to_string();
    served_chain(chains, &network)
        .and_then(|chain| chains.get(&chain).map(|served| (chain, served)))
        .ok_or_else(|| ("invalid_network", format!("{network} is not served here")))
}

/// A payment that passed every check, and what settling it submits.
pub struct Checked {
    /// Our name of its chain (`evm:<id>`).
    pub chain: String,
    /// Under the domain the requirements name, which is the token's.
    pub authorization: Authorization,
    pub proof: PayerProof,
    /// The call that deploys the payer's wallet first, when it is not deployed yet (ERC-6492).
    pub deployment: Option<erc6492::Deployment>,
}

/// Whether a payment would be accepted now, with the reference's answer when not (`docs/x402.md`,
/// "Verify"). Read-only.
pub async fn verify(
    pool: &Pool,
    chains: &Chains,
    request: &Request,
) -> Result<VerifyResponse, ApiError> {
    if super::exact_permit2::is_permit2(request) {
        return Ok(match super::exact_permit2::check(chains, request).await? {
            Ok(checked) => VerifyResponse::valid(checked.permit.owner),
            Err(invalid) => invalid,
        });
    }
    Ok(match check(pool, chains, request).await? {
        Ok(checked) => VerifyResponse::valid(checked.authorization.from),
        Err(invalid) => invalid,
    })
}

/// The payload's EIP-3009 authorization and signature, if it is one.
pub fn eip3009_payload(request: &Request) -> Option<Eip3009Payload> {
    serde_json::from_value(request.payment_payload.payload.clone()).ok()
}

/// A payment checked as the reference facilitator checks it, and what it is: the authorization
/// (under the domain the requirements name) and its signer's proof, or the reference's answer of
/// why not. Read-only: it writes nothing but what the token's first reading stores. It holds a
/// connection of `pool` only while it reads the token: the chain's answers can take long.
pub async fn check(
    pool: &Pool,
    chains: &Chains,
    request: &Request,
) -> Result<Result<Checked, VerifyResponse>, ApiError> {
    let (accepted, required) = (
        &request.payment_payload.accepted,
        &request.payment_requirements,
    );
    let Some(payload) = eip3009_payload(request) else {
        return Ok(Err(VerifyResponse::invalid(
            "unsupported_payload_type",
            None,
            "the payload is neither an EIP-3009 nor a Permit2 authorization with its signature",
        )));
    };
    let a = &payload.authorization;
    let payer = Some(a.from);
    let invalid =
        |reason, message: String| Ok(Err(VerifyResponse::invalid(reason, payer, message)));
    if accepted.scheme != "exact" || required.scheme != "exact" {
        return invalid(
            "invalid_exact_evm_scheme",
            "only the exact scheme is served".into(),
        );
    }
    let extra_text = |field: &str| {
        required
            .extra
            .as_ref()
            .and_then(|extra| extra.get(field))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let (Some(name), Some(version)) = (extra_text("name"), extra_text("version")) else {
        return invalid(
            "invalid_exact_evm_missing_eip712_domain",
            "the requirements' extra must name the token's EIP-712 name and version".into(),
        );
    };
    let (chain, (endpoint, node)) = match required_chain(chains, request) {
        Ok(served) => served,
        Err((reason, why)) => return invalid(reason, why),
    };
    let number = |raw: &str, what: &str| {
        raw.parse::<U256>()
            .map_err(|_| format!("{what} {raw:?} is not a decimal integer"))
    };
    let (value, valid_after, valid_before) = match (
        number(&a.value, "value"),
        number(&a.valid_after, "validAfter"),
        number(&a.valid_before, "validBefore"),
    ) {
        (Ok(value), Ok(after), Ok(before)) => (value, after, before),
        (Err(why), ..) | (_, Err(why), _) | (.., Err(why)) => {
            return invalid("invalid_exact_evm_payload", why);
        }
    };
    // What a payment of ours can be: it moves something, and ends at a time a date can hold.
    if value.is_zero() {
        return invalid(
            "invalid_exact_evm_payload",
            "the authorization moves nothing".into(),
        );
    }
    if valid_before > U256::from(LAST_VALID_BEFORE) {
        return invalid(
            "invalid_exact_evm_payload",
            format!("validBefore {valid_before} is not a time in seconds before the year 10000"),
        );
    }
    if a.to.is_zero() {
        return invalid(
            "invalid_exact_evm_payload",
            "the authorization pays the zero address".into(),
        );
    }
    let Ok(asset) = required.asset.parse::<Address>() else {
        return invalid(
            "invalid_exact_evm_payload",
            "the asset is not an address".into(),
        );
    };
    let authorization = Authorization {
        chain_id: endpoint.id,
        token: asset,
        token_name: name.clone(),
        token_version: version.clone(),
        from: a.from,
        to: a.to,
        value,
        valid_after: u64::try_from(valid_after).unwrap_or(u64::MAX),
        valid_before: u64::try_from(valid_before).unwrap_or(u64::MAX),
        nonce: a.nonce,
    };
    let mut conn = pool.acquire().await?;
    let support = tokens::resolve(&mut conn, endpoint, node, asset).await;
    drop(conn);
    let support = match support {
        Ok(support) => support,
        Err(tokens::ResolveError::Database(e)) => return Err(e.into()),
        Err(tokens::ResolveError::Chain(e)) => return Err(unavailable(&chain, e)),
    };
    // The signature over the domain the requirements name, as the reference checks it; an
    // undeployed wallet's after its deployment.
    let allowed = &chains.settings.erc6492_factories;
    let signature = super::erc6492::classify(node, allowed, a.from, &payload.signature)
        .await
        .map_err(|e| unavailable(&chain, e))?;
    let (proof, deployment) = match signature {
        Err((reason, why)) => return invalid(reason, why),
        Ok(Signature::AsSigned(signature)) => {
            let proof = eip3009::authorizer_proof(
                chains,
                &chain,
                &authorization,
                &support,
                &signature,
                "payer",
            );
            (proof.await, None)
        }
        Ok(Signature::Counterfactual(wrapped)) => {
            let proof = eip3009::counterfactual_proof(
                node,
                &chain,
                &authorization,
                &support,
                &wrapped,
                "payer",
            );
            (proof.await, Some(wrapped.deployment))
        }
    };
    // An undeployed wallet's signature is judged by the simulation, which the reference runs
    // last: its refusal is answered after every other check, as the reference's is.
    let (proof, simulation_refused) = match proof {
        Ok(proof) => (Some(proof), None),
        Err(ApiError::InvalidRequest(why) | ApiError::TokenNotSupported(why))
            if deployment.is_some() =>
        {
            (None, Some(why))
        }
        Err(ApiError::InvalidRequest(why) | ApiError::TokenNotSupported(why)) => {
            return invalid("invalid_exact_evm_signature", why);
        }
        Err(e) => return Err(e),
    };
    let pay_to = required.pay_to.parse::<Address>().ok();
    if pay_to != Some(a.to) {
        return invalid(
            "invalid_exact_evm_recipient_mismatch",
            format!(
                "the authorization pays {}, the requirements {}",
                a.to, required.pay_to
            ),
        );
    }
    let now = chain_time(node, &chain).await?;
    // The reference's margin: an authorization must outlive the next few seconds of the chain.
    if valid_before < U256::from(now + 6) {
        return invalid(
            "invalid_exact_evm_payload_authorization_valid_before",
            format!("validBefore {valid_before} is past the chain's time {now} (plus 6 s)"),
        );
    }
    if valid_after > U256::from(now) {
        return invalid(
            "invalid_exact_evm_payload_authorization_valid_after",
            format!("validAfter {valid_after} is after the chain's time {now}"),
        );
    }
    if required.amount.parse::<U256>().ok() != Some(value) {
        return invalid(
            "invalid_exact_evm_payload_authorization_value_mismatch",
            format!(
                "the authorization moves {value}, the requirements ask {}",
                required.amount
            ),
        );
    }
    let (token_name, token_version) = match &support {
        TokenSupport::Eip3009 { name, version, .. } => (name, version),
        TokenSupport::NotSupported(why) if why.contains("no contract") => {
            return invalid("asset_not_deployed_contract", why.clone());
        }
        TokenSupport::NotSupported(why) => {
            return invalid("invalid_exact_evm_eip3009_not_supported", why.clone());
        }
    };
    let (used, balance) = token::authorizer_state(node, asset, a.from, a.nonce)
        .await
        .map_err(|e| unavailable(&chain, e))?;
    if used || held_already(&mut *pool.acquire().await?, &chain, asset, a.from, a.nonce).await? {
        return invalid(
            "invalid_exact_evm_nonce_already_used",
            "this authorization's nonce is used, canceled, or already held here for settlement"
                .into(),
        );
    }
    if *token_name != name {
        return invalid(
            "invalid_exact_evm_token_name_mismatch",
            format!("the token's EIP-712 name is {token_name:?}, not {name:?}"),
        );
    }
    if *token_version != version {
        return invalid(
            "invalid_exact_evm_token_version_mismatch",
            format!("the token's EIP-712 version is {token_version:?}, not {version:?}"),
        );
    }
    if balance < value {
        return invalid(
            "invalid_exact_evm_insufficient_balance",
            format!("the payer holds {balance}, the payment is {value}"),
        );
    }
    let (Some(proof), None) = (proof, simulation_refused.as_ref()) else {
        let why = simulation_refused.unwrap_or_default();
        return invalid("invalid_exact_evm_transaction_simulation_failed", why);
    };
    Ok(Ok(Checked {
        chain,
        authorization,
        proof,
        deployment,
    }))
}

/// Whether we hold a payment with this authorizer's nonce on this token already: an intent with it,
/// in any state (paid, on its way, or ended: the nonce is its own).
async fn held_already(
    conn: &mut PgConnection,
    chain: &str,
    token: Address,
    authorizer: Address,
    nonce: B256,
) -> Result<bool, sqlx::Error> {
    let owner = crate::intents::repo::by_chain_nonce(
        conn,
        chain,
        &token.to_checksum(None),
        &authorizer.to_checksum(None),
        nonce.as_slice(),
        crate::intents::repo::NonceSpace::Eip3009,
    )
    .await?;
    Ok(owner.is_some())
}

/// The chain's time: its latest block's. A payment's window is judged by it, as the token judges it.
pub(super) async fn chain_time(node: &Node, chain: &str) -> Result<u64, ApiError> {
    node.get_block_by_number(BlockNumberOrTag::Latest)
        .await
        .map_err(|e| unavailable(chain, e.into()))?
        .map(|block| block.header.timestamp)
        .ok_or_else(|| unavailable(chain, ChainError::Refused("no latest block".into())))
}

pub(super) fn unavailable(chain: &str, e: ChainError) -> ApiError {
    ApiError::ChainUnavailable(format!(
        "{chain} did not answer what verifying this payment needs ({e}); retry later"
    ))
}
