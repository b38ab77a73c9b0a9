//! The `Idempotency-Key` header (`docs/api.md`, "Idempotency").

use std::fmt;

use axum::http::HeaderValue;

/// A client-chosen name for one operation: 1–255 visible ASCII characters (0x21–0x7E). The RFC 8941
/// sf-string form `"..."` is accepted too and means the text inside the quotes, so clients that
/// follow the IETF draft literally and clients that send a bare token name the same key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("Idempotency-Key must not be empty")]
    Empty,
    #[error(
        "Idempotency-Key must be at most {} characters",
        IdempotencyKey::MAX_LEN
    )]
    TooLong,
    #[error("Idempotency-Key may only hold visible ASCII characters (0x21-0x7E)")]
    NotVisibleAscii,
    #[error("Idempotency-Key starts with a quote but is not a valid RFC 8941 string")]
    BadQuotedString,
}

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    pub fn parse(header: &HeaderValue) -> Result<Self, KeyError> {
        Self::parse_bytes(header.as_bytes())
    }

    pub fn parse_bytes(raw: &[u8]) -> Result<Self, KeyError> {
        let text = match raw.first() {
            Some(b'"') => unquote_sf_string(raw)?,
            _ => raw.to_vec(),
        };
        if text.is_empty() {
            return Err(KeyError::Empty);
        }
        if !text.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return Err(KeyError::NotVisibleAscii);
        }
        if text.len() > Self::MAX_LEN {
            return Err(KeyError::TooLong);
        }
        // Only visible ASCII remains, so this cannot fail.
        Ok(Self(
            String::from_utf8(text).map_err(|_| KeyError::NotVisibleAscii)?,
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// RFC 8941 §3.3.3: `"` chars `"`, where chars are 0x20–0x7E and only `\"` and `\\` are escapes.
fn unquote_sf_string(raw: &[u8]) -> Result<Vec<u8>, KeyError> {
    let inner = raw
        .strip_prefix(b"\"")
        .and_then(|rest| rest.strip_suffix(b"\""))
        .ok_or(KeyError::BadQuotedString)?;
    let mut text = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => text.push(escaped),
                _ => return Err(KeyError::BadQuotedString),
            },
            b'"' => return Err(KeyError::BadQuotedString),
            0x20..=0x7e => text.push(b),
            _ => return Err(KeyError::NotVisibleAscii),
        }
    }
    Ok(text)
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({:?})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Result<String, KeyError> {
        IdempotencyKey::parse_bytes(raw.as_bytes()).map(|k| k.as_str().to_owned())
    }

    #[test]
    fn bare_keys_are_visible_ascii_up_to_255() {
        assert_eq!(parse("order-1001").unwrap(), "order-1001");
        assert_eq!(parse("!").unwrap(), "!");
        assert_eq!(parse("~{}[]|\\'`").unwrap(), "~{}[]|\\'`");
        assert_eq!(parse(&"k".repeat(255)).unwrap().len(), 255);
        assert_eq!(parse(&"k".repeat(256)), Err(KeyError::TooLong));
        assert_eq!(parse(""), Err(KeyError::Empty));
        assert_eq!(parse("order 1001"), Err(KeyError::NotVisibleAscii));
        assert_eq!(parse("order\t1001"), Err(KeyError::NotVisibleAscii));
        assert_eq!(
            IdempotencyKey::parse_bytes(b"caf\xc3\xa9"),
            Err(KeyError::NotVisibleAscii)
        );
        assert_eq!(
            IdempotencyKey::parse_bytes(b"a\x00b"),
            Err(KeyError::NotVisibleAscii)
        );
        assert_eq!(
            IdempotencyKey::parse_bytes(b"a\x7fb"),
            Err(KeyError::NotVisibleAscii)
        );
    }

    #[test]
    fn sf_string_form_means_the_text_inside_the_quotes() {
        assert_eq!(parse("\"order-1001\"").unwrap(), "order-1001");
        assert_eq!(parse(r#""a\"b""#).unwrap(), "a\"b");
        assert_eq!(parse(r#""a\\b""#).unwrap(), "a\\b");
        assert_eq!(
            parse(&format!("\"{}\"", "k".repeat(255))).unwrap().len(),
            255
        );
        assert_eq!(
            parse(&format!("\"{}\"", "k".repeat(256))),
            Err(KeyError::TooLong)
        );
        assert_eq!(parse("\"\""), Err(KeyError::Empty));
        // A space is a valid sf-string character but not a valid key character.
        assert_eq!(parse("\"a b\""), Err(KeyError::NotVisibleAscii));
        for bad in ["\"", "\"abc", "\"a\"b\"", r#""a\nb""#, r#""abc\""#] {
            assert_eq!(parse(bad), Err(KeyError::BadQuotedString), "{bad}");
        }
    }
}
