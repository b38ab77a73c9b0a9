//! x402's `payment-identifier` extension (`@x402/extensions`): a client's id for one payment, sent
//! in `paymentPayload.extensions["payment-identifier"].info.id`. It is what an Idempotency-Key is,
//! so a settle that carries one takes `payment-identifier:<id>` as its key (`docs/x402.md`,
//! "Payment identifiers"): the same id and body replays the stored answer byte for byte, the same
//! id with another body is refused with 409, as the extension's specification says. The prefix
//! keeps a payer's ids apart from the merchant's own keys.

use axum::{extract::Request, middleware::Next, response::IntoResponse, response::Response};
use serde_json::Value;

use crate::error::ApiError;

/// The extension's key in `extensions`, as x402 names it; also the prefix of the keys it makes.
pub const EXTENSION: &str = "payment-identifier";

/// The id's rule, as `@x402/extensions` checks it: 16 to 128 of `[A-Za-z0-9_-]`.
fn valid(id: &str) -> bool {
    (16..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The payment identifier a settle's body carries, if any: the idempotency layer's
/// [`crate::idempotency::KeyInBody`] for `/x402/settle`.
pub fn key_in_body(body: &[u8]) -> Result<Option<String>, String> {
    // A body that is no JSON carries no id; the handler says what is wrong with it.
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return Ok(None);
    };
    let field = "paymentPayload.extensions.payment-identifier.info.id";
    let Some(extension) = body
        .pointer("/paymentPayload/extensions")
        .and_then(|extensions| extensions.get(EXTENSION))
    else {
        return Ok(None);
    };
    match extension.pointer("/info/id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) if valid(id) => Ok(Some(format!("{EXTENSION}:{id}"))),
        Some(_) => Err(format!(
            "{field}: must be 16 to 128 characters, each a letter, a digit, '-' or '_'"
        )),
    }
}

/// A settle whose payment identifier was used before with another body: the extension's 409,
/// not the layer's 422 for a reused Idempotency-Key, when the key came from the identifier.
pub async fn refuse_reuse(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    match ApiError::of(&response) {
        Some(ApiError::IdempotencyKeyReused { key, stored, got })
            if key.starts_with(&format!("{EXTENSION}:")) =>
        {
            let mut refusal = ApiError::PaymentIdentifierReused(format!(
                "payment identifier {key} already used with different payload (fingerprint {stored}, got {got})"
            ))
            .into_response();
            // What the layer did stays on the answer, for the access log and the metrics.
            if let Some(outcome) = response
                .extensions()
                .get::<crate::idempotency::IdempotencyOutcome>()
            {
                refusal.extensions_mut().insert(*outcome);
            }
            refusal
        }
        _ => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(id: Value) -> Vec<u8> {
        serde_json::json!({
            "x402Version": 2,
            "paymentPayload": {"extensions": {"payment-identifier": {"info": {"required": false, "id": id}}}},
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn the_id_is_read_where_the_extension_puts_it_and_checked_by_its_rule() {
        let id = "pay_7d5d747be160e280504c099d984bcfe0";
        assert_eq!(
            key_in_body(&body(id.into())),
            Ok(Some(format!("payment-identifier:{id}")))
        );
        assert_eq!(key_in_body(&body(Value::Null)), Ok(None));
        assert_eq!(key_in_body(br#"{"paymentPayload":{}}"#), Ok(None));
        assert_eq!(key_in_body(b"not json"), Ok(None));
        for bad in [
            Value::from("short"),
            Value::from("x".repeat(129)),
            Value::from("pay_7d5d747be160e280504c099d984bcfe0!"),
            Value::from(17),
        ] {
            let refused = key_in_body(&body(bad.clone())).expect_err(&bad.to_string());
            assert!(refused.starts_with("paymentPayload.extensions.payment-identifier.info.id"));
        }
    }
}
