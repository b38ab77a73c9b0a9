//! `GET /x402/supported` and `POST /x402/verify`, the facilitator API `@x402/core`'s
//! `HTTPFacilitatorClient` calls (`docs/x402.md`). Authenticated by the merchant's API key like
//! `/v1`; verify writes nothing, so it runs outside the idempotency layer.

use std::collections::BTreeMap;

use axum::{
    Extension, Json, Router,
    extract::State,
    routing::{get, post},
};
use serde::Serialize;

use super::exact_evm::{self, Request, VerifyResponse};
use crate::{db::Pool, error::ApiError, extract::JsonBody, settlement::Chains};

pub fn router(chains: Chains) -> Router<Pool> {
    Router::new()
        .route("/x402/supported", get(supported))
        .route("/x402/verify", post(verify))
        .layer(Extension(chains))
}

/// One kind a facilitator serves.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    pub x402_version: u8,
    pub scheme: &'static str,
    /// CAIP-2, `eip155:<chain id>`.
    pub network: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SupportedResponse {
    pub kinds: Vec<SupportedKind>,
    pub extensions: Vec<String>,
    /// The addresses that submit settlements, by CAIP family (`eip155:*`): our relayer keys.
    pub signers: BTreeMap<String, Vec<String>>,
}

/// What this facilitator settles: `exact` on every served chain, x402 version 2.
#[utoipa::path(
    get,
    path = "/x402/supported",
    operation_id = "x402_supported",
    tag = "x402",
    responses((status = 200, description = "The kinds served and the relayer's addresses", body = SupportedResponse))
)]
pub async fn supported(
    Extension(chains): Extension<Chains>,
) -> Result<Json<SupportedResponse>, ApiError> {
    let kinds = chains
        .settings
        .chains
        .iter()
        .map(|chain| SupportedKind {
            x402_version: 2,
            scheme: "exact",
            network: format!("eip155:{}", chain.id),
        })
        .collect();
    let relayers = chains
        .relayer_keys()
        .map_err(|e| ApiError::Internal(e.context("RELAYER_PRIVATE_KEY was checked at start")))?
        .iter()
        .map(|key| key.address().to_checksum(None))
        .collect();
    Ok(Json(SupportedResponse {
        kinds,
        extensions: Vec::new(),
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
    Extension(chains): Extension<Chains>,
    JsonBody(request): JsonBody<Request>,
) -> Result<Json<VerifyResponse>, ApiError> {
    let mut conn = pool.acquire().await?;
    Ok(Json(exact_evm::verify(&mut conn, &chains, &request).await?))
}
