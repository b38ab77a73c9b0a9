//! The merchant's own settings: `GET /v1/merchant` and `POST /v1/merchant`
//! (`{"display_name": "…"}`), the name its payers see on checkout pages (`docs/checkout.md`).
//! Without one, pages show the merchant's id.

use axum::{Extension, Json, Router, extract::FromRef, extract::State, routing::get};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;

use crate::{
    auth::MerchantId,
    db::Pool,
    error::{ApiError, ErrorBody},
    extract::JsonBody,
    idempotency::Tx,
};

pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Pool: FromRef<S>,
{
    Router::new().route("/v1/merchant", get(show).post(update))
}

/// The authenticated merchant.
#[derive(Debug, Serialize, ToSchema)]
pub struct Merchant {
    pub id: String,
    /// Shown to payers on checkout pages; `null` until set (pages then show the id).
    pub display_name: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMerchant {
    /// 1 to 100 characters, shown as they are (the page escapes them).
    #[schema(example = "Demo Coffee Roasters")]
    pub display_name: String,
}

/// The merchant's settings.
#[utoipa::path(
    get,
    path = "/v1/merchant",
    operation_id = "retrieve_merchant",
    tag = "merchant",
    responses((status = 200, description = "The merchant's settings", body = Merchant))
)]
pub async fn show(
    State(pool): State<Pool>,
    Extension(merchant): Extension<MerchantId>,
) -> Result<Json<Merchant>, ApiError> {
    let display_name = display_name(&mut *pool.acquire().await?, merchant.as_str()).await?;
    Ok(Json(Merchant {
        id: merchant.as_str().to_owned(),
        display_name,
    }))
}

/// Set the merchant's display name.
#[utoipa::path(
    post,
    path = "/v1/merchant",
    operation_id = "update_merchant",
    tag = "merchant",
    request_body(content = UpdateMerchant, content_type = "application/json"),
    responses(
        (status = 200, description = "The merchant's settings now", body = Merchant),
        (status = 400, description = "`invalid_request`: the name is empty, longer than 100 characters or holds control characters", body = ErrorBody),
    )
)]
pub async fn update(
    Extension(merchant): Extension<MerchantId>,
    mut tx: Tx,
    JsonBody(request): JsonBody<UpdateMerchant>,
) -> Result<Json<Merchant>, ApiError> {
    let name = request.display_name.trim();
    if !(1..=100).contains(&name.chars().count()) || name.chars().any(char::is_control) {
        return Err(ApiError::InvalidRequest(
            "display_name: must be 1 to 100 characters, none of them control characters".to_owned(),
        ));
    }
    sqlx::query!(
        "INSERT INTO merchants (id, display_name) VALUES ($1, $2)
         ON CONFLICT (id) DO UPDATE SET display_name = $2, updated_at = now()",
        merchant.as_str(),
        name,
    )
    .execute(&mut *tx)
    .await?;
    Ok(Json(Merchant {
        id: merchant.as_str().to_owned(),
        display_name: Some(name.to_owned()),
    }))
}

/// The name payers see for `merchant`, if it set one.
pub async fn display_name(
    conn: &mut PgConnection,
    merchant: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!("SELECT display_name FROM merchants WHERE id = $1", merchant)
        .fetch_optional(conn)
        .await
}
