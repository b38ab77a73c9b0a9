//! The EIP-3009 authorization that pays an intent: the EIP-712 typed data the payer signs, its
//! digest, the checks a signature must pass, and the call that submits it.

use alloy::{
    dyn_abi::TypedData,
    primitives::{Address, B256, Bytes, Signature, U256},
    sol,
    sol_types::{SolCall, SolStruct},
};

use super::token::{Eip3009, eip712_domain};

sol! {
    /// EIP-3009's typed message, field for field.
    #[derive(serde::Serialize)]
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// One authorization: `value` of the token from `from` to `to`, valid until `valid_before`
/// (unix seconds, exclusive), under `nonce`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    pub chain_id: u64,
    pub token: Address,
    pub token_name: String,
    pub token_version: String,
    pub from: Address,
    pub to: Address,
    pub value: U256,
    pub valid_before: u64,
    pub nonce: B256,
}

impl Authorization {
    fn message(&self) -> TransferWithAuthorization {
        TransferWithAuthorization {
            from: self.from,
            to: self.to,
            value: self.value,
            validAfter: U256::ZERO,
            validBefore: U256::from(self.valid_before),
            nonce: self.nonce,
        }
    }

    fn domain(&self) -> alloy::sol_types::Eip712Domain {
        eip712_domain(
            &self.token_name,
            &self.token_version,
            self.chain_id,
            self.token,
        )
    }

    /// The document `eth_signTypedData_v4` takes. Numbers are written the way wallets and
    /// people read them: `chainId` a JSON number, uint256 amounts decimal strings (alloy writes
    /// hex strings, which every wallet also takes, but which hide the amount from a reader).
    pub fn typed_data(&self) -> serde_json::Value {
        let typed = TypedData::from_struct(&self.message(), Some(self.domain()));
        let mut document = serde_json::to_value(typed).expect("typed data serializes");
        document["domain"]["chainId"] = self.chain_id.into();
        document["domain"]["verifyingContract"] = self.token.to_checksum(None).into();
        let message = &mut document["message"];
        message["from"] = self.from.to_checksum(None).into();
        message["to"] = self.to.to_checksum(None).into();
        message["value"] = self.value.to_string().into();
        message["validAfter"] = "0".into();
        message["validBefore"] = self.valid_before.to_string().into();
        document
    }

    /// The EIP-712 digest the payer signs.
    pub fn digest(&self) -> B256 {
        self.message().eip712_signing_hash(&self.domain())
    }

    /// The calldata of `transferWithAuthorization(…, v, r, s)` with the payer's signature: the
    /// arguments are the signed message's own fields, so what is sent is what was signed.
    pub fn calldata(&self, signature: &PayerSignature) -> Bytes {
        let sig = signature.0;
        let message = self.message();
        Eip3009::transferWithAuthorizationCall {
            from: message.from,
            to: message.to,
            value: message.value,
            validAfter: message.validAfter,
            validBefore: message.validBefore,
            nonce: message.nonce,
            v: 27 + u8::from(sig.v()),
            r: sig.r().into(),
            s: sig.s().into(),
        }
        .abi_encode()
        .into()
    }
}

/// A 65-byte secp256k1 signature as a payer's wallet gives it: `0x` + 130 hex digits, `r || s ||
/// v` with v 27/28 or 0/1, and s in the lower half of the curve order (EIP-2), the only form the
/// token accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayerSignature(Signature);

impl PayerSignature {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let digits = raw
            .strip_prefix("0x")
            .filter(|d| d.len() == 130)
            .ok_or("must be 0x followed by 130 hex digits (r, s, v)")?;
        let bytes: [u8; 65] = hex::decode(digits)
            .map_err(|_| "must be 0x followed by 130 hex digits (r, s, v)")?
            .try_into()
            .map_err(|_| "must be 65 bytes")?;
        if !matches!(bytes[64], 0 | 1 | 27 | 28) {
            return Err(format!("v must be 27, 28, 0 or 1, got {}", bytes[64]));
        }
        let signature = Signature::from_raw_array(&bytes).map_err(|e| e.to_string())?;
        if signature.normalize_s().is_some() {
            return Err("s must be in the lower half of the curve order (EIP-2)".to_owned());
        }
        Ok(Self(signature))
    }

    /// The address whose key made this signature over `digest`.
    pub fn signer(&self, digest: &B256) -> Result<Address, String> {
        self.0
            .recover_address_from_prehash(digest)
            .map_err(|_| "is not a valid signature".to_owned())
    }

    /// The 65 stored bytes, `r || s || v` with v 27/28.
    pub fn to_bytes(self) -> [u8; 65] {
        self.0.as_bytes()
    }

    pub fn from_stored(bytes: &[u8]) -> Result<Self, String> {
        Signature::from_raw(bytes)
            .map(Self)
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> Authorization {
        Authorization {
            chain_id: 31337,
            token: "0x5FbDB2315678afecb367f032d93F642f64180aa3"
                .parse()
                .unwrap(),
            token_name: "Devnet USD".to_owned(),
            token_version: "1".to_owned(),
            from: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
                .parse()
                .unwrap(),
            to: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
                .parse()
                .unwrap(),
            value: U256::from(100_000_000u64),
            valid_before: 1_800_000_000,
            nonce: B256::repeat_byte(7),
        }
    }

    #[test]
    fn the_document_a_wallet_signs_has_the_digest_we_check() {
        let authorization = example();
        let document = authorization.typed_data();
        assert_eq!(document["domain"]["chainId"], 31337);
        assert_eq!(document["message"]["value"], "100000000");
        let parsed: TypedData = serde_json::from_value(document).unwrap();
        assert_eq!(
            parsed.eip712_signing_hash().unwrap(),
            authorization.digest()
        );
    }

    #[test]
    fn signatures_must_be_65_bytes_with_a_known_v_and_low_s() {
        let r = "1".repeat(64);
        let low_s = format!("{:0>64}", "2");
        assert!(PayerSignature::parse(&format!("0x{r}{low_s}1b")).is_ok());
        assert!(PayerSignature::parse(&format!("0x{r}{low_s}00")).is_ok());
        assert!(
            PayerSignature::parse(&format!("0x{r}{low_s}25")).is_err(),
            "EIP-155 v"
        );
        assert!(
            PayerSignature::parse(&format!("0x{r}{low_s}")).is_err(),
            "64 bytes"
        );
        let high_s = "f".repeat(63) + "0";
        assert!(
            PayerSignature::parse(&format!("0x{r}{high_s}1b")).is_err(),
            "high s"
        );
        assert!(PayerSignature::parse("0xzz").is_err());
    }
}
