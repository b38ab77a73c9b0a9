//! Endpoint secrets and signatures, as the Standard Webhooks specification defines them: the key is
//! what the base64 after `whsec_` decodes to, and a signature is `v1,` + base64 of
//! HMAC-SHA256(key, "{id}.{timestamp}.{body}").

use std::fmt;

use base64::{Engine, engine::general_purpose::STANDARD as BASE64};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

const PREFIX: &str = "whsec_";

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// 32 random bytes.
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        Self(format!("{PREFIX}{}", BASE64.encode(key)))
    }

    /// A secret as stored; only ever one this module generated.
    pub fn from_stored(stored: String) -> Self {
        Self(stored)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `v1,<signature>` of one message.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let key = BASE64
            .decode(self.0.trim_start_matches(PREFIX))
            .expect("stored secrets are whsec_ + base64");
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes keys of any size");
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
    }
}

/// Secrets never reach a log line.
impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// The `webhook-signature` header: one signature per live secret, separated by spaces.
pub fn signature_header(secrets: &[Secret], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|secret| secret.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}
