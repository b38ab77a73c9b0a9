//! Extractors shared by handlers.

use std::ops::{Deref, DerefMut};

use axum::body::Bytes;
use axum::{
    extract::{FromRequest, FromRequestParts, Request},
    http::request::Parts,
};
use serde::de::DeserializeOwned;
use sqlx::PgConnection;
use tokio::sync::OwnedMutexGuard;

use super::errors::ApiError;
use crate::db::{OpenTransaction, RequestTransaction};

/// The request's transaction (opened by the idempotency layer). Whatever a handler writes through
/// it commits together with the stored response, or not at all (SPEC §5.4).
pub struct Tx(OwnedMutexGuard<Option<OpenTransaction>>);

impl<S: Send + Sync> FromRequestParts<S> for Tx {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let slot = parts
            .extensions
            .get::<RequestTransaction>()
            .ok_or_else(|| {
                ApiError::Internal(anyhow::anyhow!(
                    "route is not wrapped by the idempotency layer"
                ))
            })?;
        let guard = slot.lock().await;
        if guard.is_none() {
            return Err(ApiError::Internal(anyhow::anyhow!(
                "request transaction already taken"
            )));
        }
        Ok(Self(guard))
    }
}

impl Deref for Tx {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        self.0.as_deref().expect("checked when extracted")
    }
}

impl DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.0.as_deref_mut().expect("checked when extracted")
    }
}

/// A JSON body parsed whatever the Content-Type says (absent, form, or JSON: SPEC §1, curl's `-d`),
/// with errors that name the offending field.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::InvalidRequest(format!("cannot read the request body: {e}")))?;
        parse_json(&body).map(JsonBody)
    }
}

pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let deserializer = &mut serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut *deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        ApiError::InvalidRequest(if path.is_empty() || path == "." {
            format!("request body must be a JSON object: {inner}")
        } else {
            format!("{path}: {inner}")
        })
    })?;
    deserializer.end().map_err(|e| {
        ApiError::InvalidRequest(format!("request body must hold one JSON object only: {e}"))
    })?;
    Ok(value)
}

/// Query-string parameters, with rejections in the API's error format.
pub struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|query| QueryParams(query.0))
            .map_err(|rejection| ApiError::InvalidRequest(rejection.body_text()))
    }
}

/// One path segment as text, with rejections (e.g. invalid UTF-8 after percent-decoding) in the
/// API's error format: a path that cannot name anything names nothing, so 404.
pub struct PathParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map(|path| PathParam(path.0))
            .map_err(|_| ApiError::NotFound("no such resource".to_owned()))
    }
}
