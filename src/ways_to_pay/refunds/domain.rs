//! A refund's id, its chain nonce and its reason: parsed at the edge, so the rest never sees a
//! malformed one.

use serde::Deserialize;
use sha3::{Digest, Keccak256};

use crate::ids;

/// `re_` + 24 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundId(String);

impl RefundId {
    pub fn generate() -> Self {
        Self(ids::generate("re_"))
    }

    /// Any string that could not be an id is simply not found: a path is not validated input.
    pub fn parse(raw: &str) -> Option<Self> {
        ids::is_valid("re_", raw).then(|| Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The EIP-3009 nonce of a refund's authorization: `keccak256("payments-api:refund:" || id)`,
/// so it can be told from an intent's (`keccak256("payments-api:" || id)`) and is never reused.
pub fn chain_nonce(id: &str) -> [u8; 32] {
    let mut hasher = Keccak256::new();
    hasher.update(b"payments-api:refund:");
    hasher.update(id.as_bytes());
    hasher.finalize().into()
}

/// Why the merchant refunds, Stripe's three words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    Duplicate,
    Fraudulent,
    RequestedByCustomer,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Duplicate => "duplicate",
            Self::Fraudulent => "fraudulent",
            Self::RequestedByCustomer => "requested_by_customer",
        }
    }
}

/// How a refund reaches its payer (`docs/refunds.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum RefundMethod {
    /// The merchant signs an EIP-3009 authorization that the relayer submits.
    Authorization,
    /// The merchant sends a plain transfer of the amount from its address to the payer, which the
    /// refund watch matches: a duplicate payment in a token without EIP-3009.
    Transfer,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refund_nonce_is_never_an_intent_nonce() {
        let id = RefundId::generate();
        assert!(RefundId::parse(id.as_str()).is_some());
        assert!(RefundId::parse("pi_0123456789abcdef01234567").is_none());
        assert_ne!(
            chain_nonce(id.as_str()),
            crate::intents::domain::chain_nonce(id.as_str())
        );
        // keccak256("payments-api:refund:re_000000000000000000000000"), as `cast keccak` says.
        assert_eq!(
            hex::encode(chain_nonce("re_000000000000000000000000")),
            hex::encode(Keccak256::digest(
                b"payments-api:refund:re_000000000000000000000000"
            ))
        );
    }
}
