//! The client secret as a key to one intent: `Authorization: Bearer <client_secret>` on the
//! checkout API, compared in constant time with the intent's own. A secret opens its intent's
//! public view and confirm only; an unknown intent and a wrong secret answer the same 404, so a
//! secret says nothing about any other intent.

use axum::{
    extract::{Path, Request, State},
    http::header,
    middleware::Next,
    response::{IntoResponse, Response},
};
use subtle::ConstantTimeEq;

use crate::{
    auth::MerchantId, db::Pool, error::ApiError, idempotency::Scope, intents::domain::IntentId,
};

/// The intent a request's client secret opened.
#[derive(Debug, Clone)]
pub struct CheckoutAccess {
    pub merchant: MerchantId,
    pub intent: IntentId,
}

/// Admits a request whose bearer token is the client secret of the intent its path names; the
/// idempotency scope of its keys is that intent's own (`checkout:<id>`), apart from any merchant's.
pub async fn require_client_secret(
    State(pool): State<Pool>,
    Path(params): Path<Vec<(String, String)>>,
    mut request: Request,
    next: Next,
) -> Response {
    let not_found = || ApiError::NotFound("no checkout for that intent".to_owned()).into_response();
    let Some(intent) = params
        .iter()
        .find(|(name, _)| name == "id")
        .and_then(|(_, id)| IntentId::parse(id))
    else {
        return not_found();
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, secret)| secret.trim().to_owned());
    let Some(presented) = presented else {
        return ApiError::Unauthorized.into_response();
    };
    let stored = match pool.acquire().await {
        Ok(mut conn) => crate::intents::repo::client_secret_of(&mut conn, &intent)
            .await
            .map_err(ApiError::from),
        Err(e) => Err(ApiError::from(e)),
    };
    let stored = match stored {
        Ok(Some(stored)) => stored,
        Ok(None) => return not_found(),
        Err(e) => return e.into_response(),
    };
    let (merchant_id, client_secret) = stored;
    let matches: bool = client_secret.as_bytes().ct_eq(presented.as_bytes()).into();
    let Ok(merchant) = MerchantId::parse(&merchant_id) else {
        return not_found();
    };
    if !matches {
        return not_found();
    }
    request
        .extensions_mut()
        .insert(Scope::new(format!("checkout:{}", intent.as_str())));
    request
        .extensions_mut()
        .insert(CheckoutAccess { merchant, intent });
    next.run(request).await
}
