//! The facilitator API `@x402/core`'s `HTTPFacilitatorClient` calls (`docs/x402.md`):
//! `GET /x402/supported`, `POST /x402/verify`, `POST /x402/settle`, and
//! `GET /x402/payments/{network}/{authorizer}/{nonce}` to find a payment whose settle answer was
//! lost. Authenticated by the merchant's API key like `/v1`. Verify writes nothing, so only settle
//! runs inside the idempotency layer, with the key optional (x402 clients send none).

use std::collections::BTreeMap;

use alloy::primitives::{Address, B256, U256};
use axum::{
    Extension, Json, Router,
    extract::{FromRef, Path, Query, State},
    middleware::from_fn_with_state,
    routing::{get, post},
};
use serde::{Deserialize, Serialize};

use super::{
    eip2612_gas_sponsoring,
    exact_evm::{self, Request, VerifyResponse},
    payment_identifier, settle,
};
use crate::{
    auth::MerchantId,
    db::Pool,
    error::ApiError,
    extract::JsonBody,
    idempotency::{IdempotencyState, idempotency_layer},
    intents::repo::PaymentIntent,
    rails::Chains,
};

/// `idempotency`: the layer's state for settle, whose key is optional whatever
/// `IDEMPOTENCY_KEY_REQUIRED` says. A settle's payment is checked on `chains` before that layer
/// takes a connection (`settle::check_first`).
pub fn router<S>(mut idempotency: IdempotencyState, chains: Chains) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Pool: FromRef<S>,
    Chains: FromRef<S>,
{
    idempotency.settings.key_required = false;
    idempotency.key_in_body = Some(payment_identifier::key_in_body);
    let checks = settle::CheckFirst {
        pool: idempotency.pool.clone(),
        chains,
        max_body_bytes: idempotency.max_body_bytes,
        request_timeout: idempotency.request_timeout,
    };
    let settle = post(settle::settle)
        .layer(from_fn_with_state(idempotency, idempotency_layer))
        .layer(from_fn_with_state(checks, settle::check_first))
        .layer(axum::middleware::from_fn(payment_identifier::refuse_reuse));
    Router::new()
        .route("/x402/supported", get(supported))
        .route("/x402/verify", post(verify))
        .route("/x402/settle", settle)
        .route(
            "/x402/payments/{network}/{authorizer}/{nonce}",
            get(payment),
        )
}

/// One kind a facilitator serves.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    pub x402_version: u8,
    pub scheme: &'static str,
    /// CAIP-2, `eip155:<chain id>`.
    pub network: String,
    /// For `upto`, `{"facilitatorAddress"}`: the relayer key a payer's witness names, the only
    /// one x402's upto proxy lets settle it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub extra: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SupportedResponse {
    pub kinds: Vec<SupportedKind>,
    pub extensions: Vec<String>,
    /// The addresses that submit settlements, by CAIP family (`eip155:*`): our relayer keys.
    pub signers: BTreeMap<String, Vec<String>>,
}

/// What this facilitator settles: `exact` on every served chain, and `upto` where a relayer key
/// can be named as its facilitator; x402 version 2.
#[utoipa::path(
    get,
    path = "/x402/supported",
    operation_id = "x402_supported",
    tag = "x402",
    responses((status = 200, description = "The kinds served and the relayer's addresses", body = SupportedResponse))
)]
pub async fn supported(State(chains): State<Chains>) -> Result<Json<SupportedResponse>, ApiError> {
    let relayers: Vec<String> = chains
        .relayer_keys()
        .map_err(|e| ApiError::Internal(e.context("RELAYER_PRIVATE_KEY was checked at start")))?
        .iter()
        .map(|key| key.address().to_checksum(None))
        .collect();
    let mut kinds = Vec::new();
    for chain in &chains.settings.chains {
        let network = format!("eip155:{}", chain.id);
        kinds.push(SupportedKind {
            x402_version: 2,
            scheme: "exact",
            network: network.clone(),
            extra: None,
        });
        if let Some(facilitator) = relayers.first() {
            kinds.push(SupportedKind {
                x402_version: 2,
                scheme: "upto",
                network,
                extra: Some(serde_json::json!({ "facilitatorAddress": facilitator })),
            });
        }
    }
    Ok(Json(SupportedResponse {
        kinds,
        extensions: vec![
            eip2612_gas_sponsoring::EXTENSION.to_owned(),
            payment_identifier::EXTENSION.to_owned(),
        ],
        signers: BTreeMap::from([("eip155:*".to_owned(), relayers)]),
    }))
}

/// Whether a payment would be accepted now: 200 with `isValid` and, if not, the reference's
/// `invalidReason`. Nothing is written.
#[utoipa::path(
    post,
    path = "/x402/verify",
    operation_id = "x402_verify",
    tag = "x402",
    request_body(content = Object, content_type = "application/json", description = "`{x402Version: 2, paymentPayload, paymentRequirements}`"),
    responses(
        (status = 200, description = "Valid or not, and why", body = VerifyResponse),
        (status = 400, description = "`invalid_request`: not a v2 verify request", body = crate::error::ErrorBody),
    )
)]
pub async fn verify(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    JsonBody(request): JsonBody<Request>,
) -> Result<Json<VerifyResponse>, ApiError> {
    Ok(Json(exact_evm::verify(&pool, &chains, &request).await?))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct PaymentParams {
    /// The token, when the authorizer used the same nonce on several.
    pub asset: Option<String>,
}

/// An x402 payment this merchant settled, as stored.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct X402Payment {
    /// CAIP-2.
    pub network: String,
    pub asset: String,
    pub payer: String,
    pub nonce: String,
    /// The transaction the payment's one `success: true` named, once a settle was answered so.
    pub success_transaction: Option<String>,
    /// Every transaction sent for it, the newest last.
    pub transactions: Vec<String>,
    /// The payment as an intent: its state says whether the transfer is confirmed.
    pub payment_intent: PaymentIntent,
}

/// Find a payment by the key the client chose: for a settle whose answer was lost.
#[utoipa::path(
    get,
    path = "/x402/payments/{network}/{authorizer}/{nonce}",
    operation_id = "x402_payment",
    tag = "x402",
    params(
        ("network" = String, Path, description = "CAIP-2, e.g. eip155:31337"),
        ("authorizer" = String, Path, description = "The payer's address"),
        ("nonce" = String, Path, description = "The authorization's nonce, 0x + 64 hex digits; a Permit2 nonce also in decimal"),
        PaymentParams,
    ),
    responses(
        (status = 200, description = "The payment", body = X402Payment),
        (status = 400, description = "`invalid_request`: the authorizer used this nonce on several tokens; name the asset", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such payment of this merchant", body = crate::error::ErrorBody),
    )
)]
pub async fn payment(
    State(pool): State<Pool>,
    State(chains): State<Chains>,
    Extension(merchant): Extension<MerchantId>,
    Path((network, authorizer, nonce)): Path<(String, String, String)>,
    Query(params): Query<PaymentParams>,
) -> Result<Json<X402Payment>, ApiError> {
    let not_found = || ApiError::NotFound("no x402 payment of yours with that key".to_owned());
    let chain = exact_evm::served_chain(&chains, &network).ok_or_else(not_found)?;
    let authorizer = authorizer.parse::<Address>().map_err(|_| not_found())?;
    // 32 bytes in hex, or a Permit2 nonce as the permit writes it, in decimal.
    let nonce = nonce
        .parse::<B256>()
        .or_else(|_| nonce.parse::<U256>().map(B256::from))
        .map_err(|_| not_found())?;
    let asset = match params.asset.as_deref().map(str::parse::<Address>) {
        Some(Ok(asset)) => Some(asset.to_checksum(None)),
        Some(Err(_)) => return Err(not_found()),
        None => None,
    };
    let mut conn = pool.acquire().await?;
    let rows = sqlx::query!(
        r#"SELECT asset, intent_id, success_tx FROM x402_payments
            WHERE merchant_id = $1 AND chain = $2 AND authorizer = $3 AND nonce = $4
              AND ($5::text IS NULL OR asset = $5)
            LIMIT 2"#,
        merchant.as_str(),
        chain,
        authorizer.to_checksum(None),
        nonce.as_slice(),
        asset,
    )
    .fetch_all(&mut *conn)
    .await?;
    let row = match rows.as_slice() {
        [] => return Err(not_found()),
        [row] => row,
        _ => {
            return Err(ApiError::InvalidRequest(
                "this authorizer used the nonce on several tokens: name one with ?asset=".into(),
            ));
        }
    };
    let id = crate::intents::domain::IntentId::parse(&row.intent_id)
        .ok_or_else(|| ApiError::internal("a stored intent id"))?;
    let intent = crate::intents::repo::find(&mut conn, &merchant, &id)
        .await?
        .ok_or_else(|| ApiError::internal("an x402 payment without its intent"))?;
    let transactions = crate::rails::outbox::tx_hashes_of(
        &mut conn,
        crate::intents::payment::KIND,
        &row.intent_id,
    )
    .await?;
    Ok(Json(X402Payment {
        network,
        asset: row.asset.clone(),
        payer: authorizer.to_checksum(None),
        nonce: nonce.to_string(),
        success_transaction: row.success_tx.clone(),
        transactions,
        payment_intent: intent,
    }))
}
