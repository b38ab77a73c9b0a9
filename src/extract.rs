//! Extractors every capability's handlers use, with rejections in the API's error format. (The
//! request's transaction is extracted with [`crate::db::Tx`].)

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::request::Parts,
};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body parsed whatever the Content-Type says (absent, form, or JSON, as curl's `-d` sends
/// it), with errors that name the offending field.
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

/// Parses a body that must be one JSON object. (serde would also read an array into a struct,
/// field by position; a body is never that.)
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.trim_ascii_start().first() != Some(&b'{') {
        return Err(ApiError::InvalidRequest(
            "request body must be a JSON object".to_owned(),
        ));
    }
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
