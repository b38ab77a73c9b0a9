//! A handler's answer in the form it is stored and replayed: the first answer and every replay are
//! built from the same bytes, so they cannot drift apart.

use axum::{
    body::{Body, to_bytes},
    http::{HeaderName, HeaderValue, StatusCode, header},
    response::Response,
};

use crate::error::ApiError;

/// A handler's whole answer: status, headers in the order it set them, body bytes.
#[derive(Debug, Clone)]
pub struct StoredResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Headers that describe one transmission rather than the answer, so they are never stored.
const UNSTORED_HEADERS: [HeaderName; 5] = [
    header::DATE,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
    HeaderName::from_static("x-request-id"),
];

impl StoredResponse {
    /// Reads the handler's response into its stored form.
    pub async fn capture(response: Response) -> Result<Self, ApiError> {
        let (parts, body) = response.into_parts();
        let body = to_bytes(body, usize::MAX).await.map_err(|e| {
            ApiError::internal(&format!("cannot buffer the handler's response: {e}"))
        })?;
        let headers = parts
            .headers
            .iter()
            .filter(|(name, _)| !UNSTORED_HEADERS.contains(name))
            .map(|(name, value)| {
                value
                    .to_str()
                    .map(|v| (name.as_str().to_owned(), v.to_owned()))
                    .map_err(|_| ApiError::internal(&format!("header {name} is not visible ASCII")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            status: parts.status.as_u16(),
            headers,
            body: body.to_vec(),
        })
    }

    /// The response these bytes describe.
    pub fn into_response(self) -> Response {
        let mut response = Response::new(Body::from(self.body));
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        for (name, value) in self.headers {
            if let (Ok(name), Ok(value)) =
                (HeaderName::try_from(name), HeaderValue::try_from(value))
            {
                headers.append(name, value);
            }
        }
        response
    }
}
