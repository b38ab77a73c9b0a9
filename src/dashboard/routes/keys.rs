//! API keys: list, create, revoke, rotate (the CLI's `api-keys`).

use axum::{extract::State, http::StatusCode, response::Response};
use serde::Deserialize;

use super::Nothing;
use crate::dashboard::{
    pages::{self, Section},
    people::Permission,
    web::{Acting, PageError, Signed, see_other},
};
use crate::{auth, db::Pool, error::ApiError};

pub(super) async fn keys_page(
    pool: &Pool,
    signed: &Signed,
    new_secret: Option<&str>,
) -> Result<Response, PageError> {
    let keys = auth::list(pool, &signed.merchant()).await?;
    let t = signed.text();
    let content = pages::api_keys(t, &signed.session, &keys, new_secret);
    Ok(signed.page(StatusCode::OK, t.api_keys, Section::ApiKeys, content))
}

pub(super) async fn api_keys(
    State(pool): State<Pool>,
    signed: Signed,
) -> Result<Response, PageError> {
    signed.require(Permission::Read)?;
    keys_page(&pool, &signed, None).await
}

/// The CLI's `api-keys create`; the secret is in this answer only (never stored, never cached).
pub(super) async fn create_key(
    State(pool): State<Pool>,
    Acting { signed, .. }: Acting<Nothing>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageApiKeys)?;
    let token = auth::create(&pool, &signed.merchant(), &signed.who())
        .await
        .map_err(|e| PageError::Api(ApiError::Internal(e)))?;
    keys_page(&pool, &signed, Some(&token)).await
}

#[derive(Deserialize)]
pub(super) struct RevokeForm {
    prefix: String,
}

/// The CLI's `api-keys revoke`, for this merchant's keys only.
pub(super) async fn revoke_key(
    State(pool): State<Pool>,
    Acting { signed, form }: Acting<RevokeForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageApiKeys)?;
    auth::revoke(&pool, Some(&signed.merchant()), &form.prefix, &signed.who())
        .await
        .map_err(|_| PageError::NotFound)?;
    Ok(see_other("/dashboard/api-keys"))
}

#[derive(Deserialize)]
pub(super) struct RotateForm {
    old_expires_in: u64,
}

/// The CLI's `api-keys rotate`: a new key shown once, the others expiring after the overlap.
pub(super) async fn rotate_key(
    State(pool): State<Pool>,
    Acting { signed, form }: Acting<RotateForm>,
) -> Result<Response, PageError> {
    signed.require(Permission::ManageApiKeys)?;
    if form.old_expires_in > 30 * 24 * 3600 {
        return Err(PageError::BadRequest(
            "old_expires_in: at most 30 days (2592000 seconds)".to_owned(),
        ));
    }
    let overlap = std::time::Duration::from_secs(form.old_expires_in);
    let token = auth::rotate(&pool, &signed.merchant(), overlap, &signed.who())
        .await
        .map_err(|e| PageError::Api(ApiError::Internal(e)))?;
    keys_page(&pool, &signed, Some(&token)).await
}
