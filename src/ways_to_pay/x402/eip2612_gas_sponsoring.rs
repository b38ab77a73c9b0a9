//! x402's `eip2612GasSponsoring` extension (`@x402/extensions`): a payer by Permit2 whose token
//! has EIP-2612 and who has not approved Permit2 signs the token's `permit` for Permit2 beside its
//! payment, in `paymentPayload.extensions.eip2612GasSponsoring.info`; the facilitator submits both
//! in one call of the proxy's `settleWithPermit`, so the payer needs neither gas nor an approval
//! transaction. Read and checked as `@x402/evm`'s Permit2 facilitator does (`docs/x402.md`, "EIP-2612
//! gas sponsoring").

use alloy::primitives::{Address, U256};
use serde_json::Value;

use super::exact_evm::Request;
use crate::rails::evm::{
    authorization::PayerSignature,
    permit2::{PERMIT2, TokenPermit},
};

/// The extension's key in `extensions`, as x402 names it.
pub const EXTENSION: &str = "eip2612GasSponsoring";

/// The permit a payment carries, as sent: every field the extension's schema requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sponsored {
    from: String,
    asset: String,
    spender: String,
    amount: String,
    nonce: String,
    deadline: String,
    signature: String,
    version: String,
}

/// The extension's permit, if the payment carries one with every field; a payment whose info
/// lacks one is read as one without the extension, as the reference reads it.
pub fn of(request: &Request) -> Option<Sponsored> {
    let extensions = serde_json::to_value(&request.payment_payload.extensions).ok()?;
    let info = extensions.get(EXTENSION)?.get("info")?;
    // The reference's test is JavaScript's truthiness: absent, null, "" and 0 are missing.
    let field = |name: &str| match info.get(name)? {
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        Value::Null | Value::Bool(false) => None,
        Value::Number(n) if n.as_f64() == Some(0.0) => None,
        other => Some(other.to_string()),
    };
    Some(Sponsored {
        from: field("from")?,
        asset: field("asset")?,
        spender: field("spender")?,
        amount: field("amount")?,
        nonce: field("nonce")?,
        deadline: field("deadline")?,
        signature: field("signature")?,
        version: field("version")?,
    })
}

impl Sponsored {
    /// The permit, if it is one for this payment: its fields well formed, signed by the payer
    /// (`from`), for the payment's `asset`, letting Permit2 spend, alive past the chain's time
    /// `now` (plus the reference's 6 s). Otherwise the reference's reason and why. Whether the
    /// signature is the owner's is the token's to say: the settle's simulation asks it.
    pub fn check(
        &self,
        payer: Address,
        asset: Address,
        now: u64,
    ) -> Result<TokenPermit, (&'static str, String)> {
        let format = |why: String| ("invalid_eip2612_extension_format", why);
        let address = |raw: &str, what: &str| {
            is_address(raw)
                .then(|| raw.parse::<Address>().ok())
                .flatten()
                .ok_or_else(|| format(format!("{what} {raw:?} is not an address")))
        };
        let integer = |raw: &str, what: &str| {
            (raw.bytes().all(|b| b.is_ascii_digit()))
                .then(|| raw.parse::<U256>().ok())
                .flatten()
                .ok_or_else(|| format(format!("{what} {raw:?} is not a uint256")))
        };
        let from = address(&self.from, "from")?;
        let permit_asset = address(&self.asset, "asset")?;
        let spender = address(&self.spender, "spender")?;
        let value = integer(&self.amount, "amount")?;
        integer(&self.nonce, "nonce")?;
        let deadline = integer(&self.deadline, "deadline")?;
        if !is_version(&self.version) {
            return Err(format(format!(
                "version {:?} is not a version",
                self.version
            )));
        }
        // The proxy takes r, s and v apart: the signature must be a key's 65 bytes.
        let signature = PayerSignature::parse(&self.signature)
            .map_err(|why| format(format!("signature {why}")))?;
        if from != payer {
            let why = format!("the permit is {from}'s, the payment {payer}'s");
            return Err(("eip2612_from_mismatch", why));
        }
        if permit_asset != asset {
            let why = format!("the permit is for {permit_asset}, the payment in {asset}");
            return Err(("eip2612_asset_mismatch", why));
        }
        if spender != PERMIT2 {
            let why = format!("the permit lets {spender} spend, not Permit2 {PERMIT2}");
            return Err(("eip2612_spender_not_permit2", why));
        }
        if deadline < U256::from(now + 6) {
            let why = format!("the deadline {deadline} is past the chain's time {now} (plus 6 s)");
            return Err(("eip2612_deadline_expired", why));
        }
        Ok(TokenPermit {
            value,
            deadline,
            signature: signature.to_bytes(),
        })
    }

    /// What the permit says, for the payment's fingerprint: the same payment with another permit
    /// is another payload.
    pub fn canonical(&self) -> Value {
        serde_json::json!({
            "from": self.from.to_ascii_lowercase(),
            "asset": self.asset.to_ascii_lowercase(),
            "spender": self.spender.to_ascii_lowercase(),
            "amount": self.amount,
            "nonce": self.nonce,
            "deadline": self.deadline,
            "signature": self.signature.to_ascii_lowercase(),
            "version": self.version,
        })
    }
}

/// `^0x[a-fA-F0-9]{40}$`, the extension's address.
fn is_address(raw: &str) -> bool {
    raw.strip_prefix("0x")
        .is_some_and(|hex| hex.len() == 40 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `^[0-9]+(\.[0-9]+)*$`, the extension's version.
fn is_version(raw: &str) -> bool {
    raw.split('.')
        .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(info: Value) -> Request {
        serde_json::from_value(serde_json::json!({
            "x402Version": 2,
            "paymentPayload": {
                "x402Version": 2,
                "accepted": requirements(),
                "payload": {},
                "extensions": {EXTENSION: {"info": info}},
            },
            "paymentRequirements": requirements(),
        }))
        .unwrap()
    }

    fn requirements() -> Value {
        serde_json::json!({
            "scheme": "exact", "network": "eip155:31337", "amount": "10000",
            "asset": ASSET, "payTo": PAYER, "maxTimeoutSeconds": 60, "extra": {}
        })
    }

    const PAYER: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
    const ASSET: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";

    fn info() -> Value {
        serde_json::json!({
            "description": "…", "version": "1", "from": PAYER, "asset": ASSET,
            "spender": PERMIT2.to_checksum(None), "amount": "10000", "nonce": "0",
            "deadline": "2000", "signature": format!("0x{}1b", "11".repeat(64)),
        })
    }

    fn checked(change: impl FnOnce(&mut Value)) -> Result<TokenPermit, &'static str> {
        let mut info = info();
        change(&mut info);
        of(&request(info))
            .expect("every field is there")
            .check(PAYER.parse().unwrap(), ASSET.parse().unwrap(), 1000)
            .map_err(|(reason, _)| reason)
    }

    #[test]
    fn a_permit_for_the_payment_is_read_with_v_as_the_token_takes_it() {
        let permit = checked(|_| {}).unwrap();
        assert_eq!(permit.value, U256::from(10_000));
        assert_eq!(permit.deadline, U256::from(2000));
        assert_eq!(permit.signature[64], 27);
        let permit = checked(|i| i["signature"] = format!("0x{}00", "11".repeat(64)).into());
        assert_eq!(permit.unwrap().signature[64], 27, "v 0 is 27");
    }

    #[test]
    fn a_missing_field_is_no_extension() {
        for field in [
            "from",
            "asset",
            "spender",
            "amount",
            "nonce",
            "deadline",
            "signature",
            "version",
        ] {
            let mut info = info();
            info[field] = "".into();
            assert_eq!(of(&request(info)), None, "{field} empty");
        }
        let mut info = info();
        info.as_object_mut().unwrap().remove("signature");
        assert_eq!(of(&request(info)), None);
    }

    #[test]
    fn each_refusal_has_the_references_reason() {
        type Change = fn(&mut Value);
        let cases: [(&str, Change); 8] = [
            ("invalid_eip2612_extension_format", |i| {
                i["from"] = "0x12".into()
            }),
            ("invalid_eip2612_extension_format", |i| {
                i["amount"] = "-1".into()
            }),
            ("invalid_eip2612_extension_format", |i| {
                i["version"] = "1.".into()
            }),
            ("invalid_eip2612_extension_format", |i| {
                i["signature"] = "0x1234".into()
            }),
            ("eip2612_from_mismatch", |i| i["from"] = ASSET.into()),
            ("eip2612_asset_mismatch", |i| i["asset"] = PAYER.into()),
            ("eip2612_spender_not_permit2", |i| {
                i["spender"] = PAYER.into()
            }),
            ("eip2612_deadline_expired", |i| {
                i["deadline"] = "1005".into()
            }),
        ];
        for (reason, change) in cases {
            assert_eq!(checked(change), Err(reason));
        }
    }
}
