//! What "the same request" means (`docs/api.md`, "Idempotency").

use std::fmt;

use sha2::{Digest, Sha256};

/// SHA-256 of `METHOD \n PATH[?QUERY] \n BODY` over the raw body bytes, never parsed JSON: a false
/// reject (`{"a":1,"b":2}` vs `{"b":2,"a":1}`) costs the client a new key, a false accept pays the
/// wrong amount. Method and target cannot contain a newline, so the framing is unambiguous.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    pub fn of(method: &str, path_and_query: &str, body: &[u8]) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(method.as_bytes());
        hasher.update(b"\n");
        hasher.update(path_and_query.as_bytes());
        hasher.update(b"\n");
        hasher.update(body);
        Self(hasher.finalize().into())
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The first 16 hex digits, as shown in `idempotency_key_reused` details.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..8])
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", self.short())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_is_method_newline_target_newline_raw_body() {
        let body = br#"{"amount":"1"}"#;
        let expected: [u8; 32] =
            Sha256::digest(b"POST\n/v1/payment_intents\n{\"amount\":\"1\"}").into();
        assert_eq!(
            Fingerprint::of("POST", "/v1/payment_intents", body).as_bytes(),
            &expected
        );
        assert_eq!(
            Fingerprint::of("POST", "/v1/payment_intents", body).short(),
            hex::encode(&expected[..8])
        );
    }

    #[test]
    fn every_part_counts() {
        let base = Fingerprint::of("POST", "/v1/payment_intents", br#"{"a":1,"b":2}"#);
        assert_ne!(
            base,
            Fingerprint::of("POST", "/v1/payment_intents", br#"{"b":2,"a":1}"#)
        );
        assert_ne!(
            base,
            Fingerprint::of("POST", "/v1/payment_intents?x=1", br#"{"a":1,"b":2}"#)
        );
        assert_ne!(
            base,
            Fingerprint::of("PUT", "/v1/payment_intents", br#"{"a":1,"b":2}"#)
        );
        assert_ne!(
            base,
            Fingerprint::of("POST", "/v1/payment_intents", br#"{"a":1,"b":2} "#)
        );
        // Moving bytes across the separator changes the fingerprint.
        assert_ne!(
            Fingerprint::of("POST", "/a", b"b"),
            Fingerprint::of("POST", "/a\nb", b"")
        );
    }

    #[test]
    fn short_form_is_sixteen_hex_digits() {
        let fp = Fingerprint::of("POST", "/", b"");
        assert_eq!(fp.short().len(), 16);
        assert_eq!(Fingerprint::from_bytes(fp.as_bytes()), Some(fp));
        assert_eq!(Fingerprint::from_bytes(&[0u8; 31]), None);
    }
}
