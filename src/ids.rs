//! Resource ids: a prefix (`pi_`, `evt_`, `we_`) and 24 lowercase hex digits, 96 random bits, so
//! an id can be neither guessed nor enumerated.

use rand::RngCore;

pub fn generate(prefix: &str) -> String {
    let mut bytes = [0u8; 12];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", hex::encode(bytes))
}

/// Whether `raw` has the shape of an id with `prefix`.
pub fn is_valid(prefix: &str, raw: &str) -> bool {
    raw.strip_prefix(prefix).is_some_and(|digits| {
        digits.len() == 24
            && digits
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}
