//! Property tests of every parser and of the fingerprint: round trips, limits, and no panics on
//! arbitrary input.

use payments_api::{
    idempotency::{Fingerprint, IdempotencyKey},
    intents::domain::{Address, Amount, Chain, ExpiresIn},
};
use proptest::prelude::*;
use sha2::{Digest, Sha256};

proptest! {
    #[test]
    fn visible_ascii_keys_round_trip(key in "[\\x21-\\x7e]{1,255}") {
        // A leading quote asks for the sf-string form; those are covered below.
        prop_assume!(!key.starts_with('"'));
        let parsed = IdempotencyKey::parse_bytes(key.as_bytes()).unwrap();
        prop_assert_eq!(parsed.as_str(), key.as_str());
    }

    #[test]
    fn sf_strings_mean_their_unescaped_text(key in "[\\x21-\\x7e]{1,255}") {
        let quoted = format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
        let parsed = IdempotencyKey::parse_bytes(quoted.as_bytes()).unwrap();
        prop_assert_eq!(parsed.as_str(), key.as_str());
    }

    #[test]
    fn keys_longer_than_255_or_with_invisible_bytes_are_rejected(
        long in "[a-z]{256,400}",
        prefix in "[a-z]{0,10}",
        bad in prop::sample::select(vec![0u8, b' ', b'\t', 0x7f, 0x80, 0xff]),
    ) {
        prop_assert!(IdempotencyKey::parse_bytes(long.as_bytes()).is_err());
        let mut bytes = prefix.into_bytes();
        bytes.push(bad);
        prop_assert!(IdempotencyKey::parse_bytes(&bytes).is_err());
    }

    #[test]
    fn key_parser_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = IdempotencyKey::parse_bytes(&bytes);
    }

    #[test]
    fn amounts_round_trip_and_respect_their_bounds(n in 1u128.., digits in "[0-9]{1,100}") {
        let amount = Amount::parse(&n.to_string()).unwrap();
        prop_assert_eq!(amount.as_str(), n.to_string());
        let parsed = Amount::parse(&digits);
        let canonical = !digits.starts_with('0') && digits.len() <= 78;
        if !canonical {
            prop_assert!(parsed.is_err());
        }
        if digits.len() < 78 && !digits.starts_with('0') {
            prop_assert!(parsed.is_ok());
        }
    }

    #[test]
    fn amount_parser_never_panics(raw in "\\PC{0,200}") {
        let _ = Amount::parse(&raw);
    }

    #[test]
    fn addresses_parse_in_every_accepted_case_to_one_value(bytes in prop::array::uniform20(any::<u8>())) {
        let lower = format!("0x{}", hex::encode(bytes));
        let address = Address::parse(&lower).unwrap();
        let checksummed = address.to_checksum();
        prop_assert_eq!(Address::parse(&checksummed).unwrap(), address);
        prop_assert_eq!(Address::parse(&format!("0x{}", hex::encode_upper(bytes))).unwrap(), address);
        prop_assert_eq!(checksummed.to_lowercase(), lower);
    }

    #[test]
    fn address_parser_never_panics(raw in "\\PC{0,100}") {
        let _ = Address::parse(&raw);
    }

    #[test]
    fn chains_round_trip(id in 1u64..) {
        let raw = format!("evm:{id}");
        let chain = Chain::parse(&raw).unwrap();
        prop_assert_eq!(chain.as_str(), raw.as_str());
        let padded = format!("evm:0{id}");
        prop_assert!(Chain::parse(&padded).is_err());
    }

    #[test]
    fn chain_parser_never_panics(raw in "\\PC{0,100}") {
        let _ = Chain::parse(&raw);
    }

    #[test]
    fn expiry_is_accepted_exactly_within_its_bounds(seconds in any::<i64>()) {
        prop_assert_eq!(ExpiresIn::parse(seconds).is_ok(), (60..=86_400).contains(&seconds));
    }

    #[test]
    fn fingerprint_is_sha256_of_the_framed_request(
        method in "[A-Z]{3,7}",
        path in "/[a-z0-9_/]{0,40}(\\?[a-z=&]{0,20})?",
        body in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut framed = format!("{method}\n{path}\n").into_bytes();
        framed.extend_from_slice(&body);
        let expected: [u8; 32] = Sha256::digest(&framed).into();
        let fingerprint = Fingerprint::of(&method, &path, &body);
        prop_assert_eq!(fingerprint.as_bytes(), &expected);
        prop_assert_eq!(fingerprint.short(), hex::encode(&expected[..8]));
    }

    #[test]
    fn any_change_to_the_body_changes_the_fingerprint(
        body in prop::collection::vec(any::<u8>(), 1..256),
        index in any::<prop::sample::Index>(),
        flip in 1u8..,
    ) {
        let mut changed = body.clone();
        let i = index.index(body.len());
        changed[i] ^= flip;
        prop_assert_ne!(Fingerprint::of("POST", "/v1/payment_intents", &body), Fingerprint::of("POST", "/v1/payment_intents", &changed));
    }
}
