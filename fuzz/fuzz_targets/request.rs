//! The request path up to the database: the Idempotency-Key header as the layer reads it, the
//! fingerprint of the raw body, and the create handler's validation of that body. Input: the key
//! header's bytes, a newline, then the body. Nothing here may panic, and what parses must hold
//! the promises its type makes.
#![no_main]

use axum::http::HeaderValue;
use libfuzzer_sys::fuzz_target;
use payments_api::{
    extract::parse_json,
    idempotency::{Fingerprint, IdempotencyKey},
    intents::{
        domain::{Address, Amount},
        routes::CreateIntentRequest,
    },
};

fuzz_target!(|data: &[u8]| {
    let (key, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(header) = HeaderValue::from_bytes(key) {
        if let Ok(key) = IdempotencyKey::parse(&header) {
            let text = key.as_str();
            assert!((1..=IdempotencyKey::MAX_LEN).contains(&text.len()));
            assert!(text.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        }
    }
    let fingerprint = Fingerprint::of("POST", "/v1/payment_intents", body);
    assert_eq!(fingerprint.short().len(), 16);
    if let Ok(request) = parse_json::<CreateIntentRequest>(body) {
        // A parsed address re-parses to itself from its checksummed form.
        let addresses = [request.token, request.payer, request.merchant];
        for address in addresses.into_iter().flatten() {
            assert_eq!(Address::parse(&address.to_checksum()).unwrap(), address);
        }
        // Base units parse without a leading zero; a price ("0.50") may have one.
        if let Ok(amount) = Amount::parse(&request.amount) {
            assert!(!amount.as_str().starts_with('0'));
        }
    }
});
