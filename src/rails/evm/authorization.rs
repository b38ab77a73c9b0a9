//! The EIP-3009 authorization that pays an intent: the EIP-712 typed data the payer signs, its
//! digest, the checks a signature must pass, and the call that submits it.

use alloy::{
    dyn_abi::TypedData,
    primitives::{Address, B256, Bytes, Signature, U256},
    sol,
    sol_types::{SolCall, SolStruct},
};

use super::token::{Eip3009, Eip3009Bytes, eip712_domain};
use crate::rails::rpc::{ChainError, Node};

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
    /// 0 for ours; an x402 client chooses its own.
    pub valid_after: u64,
    pub valid_before: u64,
    pub nonce: B256,
}

impl Authorization {
    fn message(&self) -> TransferWithAuthorization {
        TransferWithAuthorization {
            from: self.from,
            to: self.to,
            value: self.value,
            validAfter: U256::from(self.valid_after),
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
        message["validAfter"] = self.valid_after.to_string().into();
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

/// What proves the payer authorized the payment: a signature by the payer's own key, or, when the
/// payer is a smart-contract wallet, whatever bytes its ERC-1271 `isValidSignature` accepts (a
/// Safe's, a Coinbase Smart Wallet's), which the token checks with the wallet the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayerProof {
    Key(PayerSignature),
    Contract(Bytes),
}

impl Authorization {
    /// The call that submits this authorization with `proof`: the `v, r, s` form every EIP-3009
    /// token has for a key's signature, the `bytes signature` form (USDC v2.2) for a contract's.
    pub fn calldata_for(&self, proof: &PayerProof) -> Bytes {
        match proof {
            PayerProof::Key(signature) => self.calldata(signature),
            PayerProof::Contract(signature) => {
                let message = self.message();
                Eip3009Bytes::transferWithAuthorizationCall {
                    from: message.from,
                    to: message.to,
                    value: message.value,
                    validAfter: message.validAfter,
                    validBefore: message.validBefore,
                    nonce: message.nonce,
                    signature: signature.clone(),
                }
                .abi_encode()
                .into()
            }
        }
    }
}

/// The most bytes a contract wallet's signature may have (a Safe's with many owners, a passkey
/// wallet's with its WebAuthn data fit well inside).
pub const MAX_CONTRACT_SIGNATURE_BYTES: usize = 4096;

/// A signature's bytes: `0x` and an even number of hex digits.
pub fn signature_bytes(raw: &str) -> Result<Bytes, String> {
    let digits = raw
        .strip_prefix("0x")
        .ok_or("must be 0x followed by hex digits")?;
    let bytes = hex::decode(digits).map_err(|_| "must be 0x followed by hex digits")?;
    if bytes.is_empty() || bytes.len() > MAX_CONTRACT_SIGNATURE_BYTES {
        return Err(format!("must be 1 to {MAX_CONTRACT_SIGNATURE_BYTES} bytes"));
    }
    Ok(bytes.into())
}

/// What a payer's address says of a signature when it is a contract (ERC-1271).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalletAnswer {
    /// No code at the address: a key's account, which signs for itself.
    NotAContract,
    Accepts,
    Refuses,
}

/// Asks the wallet at `payer`, by `eth_call` of `isValidSignature(digest, signature)`, whether
/// it accepts the signature: never our own guess at what a wallet accepts.
pub async fn ask_wallet(
    node: &Node,
    payer: Address,
    digest: B256,
    signature: &Bytes,
) -> Result<WalletAnswer, ChainError> {
    use alloy::providers::Provider;
    if node.get_code_at(payer).await?.is_empty() {
        return Ok(WalletAnswer::NotAContract);
    }
    let wallet = Erc1271::new(payer, node);
    match wallet
        .isValidSignature(digest, signature.clone())
        .call()
        .await
    {
        Ok(magic) if magic == Erc1271::isValidSignatureCall::SELECTOR => Ok(WalletAnswer::Accepts),
        Ok(_) => Ok(WalletAnswer::Refuses),
        Err(e) => match ChainError::from(e) {
            ChainError::Unreachable(why) => Err(ChainError::Unreachable(why)),
            // A wallet that reverts (or is no ERC-1271 wallet at all) does not accept it.
            _ => Ok(WalletAnswer::Refuses),
        },
    }
}

/// Asks the token, by `eth_call` of the transfer `proof` would make, whether it would take it now:
/// `Ok(None)` if so, `Ok(Some(reason))` with its revert reason if not. A token may have the
/// `bytes signature` form and still check only keys (ECDSA), never a contract wallet: only the
/// token itself can say.
pub async fn simulate_transfer(
    node: &Node,
    authorization: &Authorization,
    proof: &PayerProof,
) -> Result<Option<String>, ChainError> {
    crate::rails::rpc::simulate(
        node,
        None,
        authorization.token,
        authorization.calldata_for(proof),
    )
    .await
}

sol! {
    /// ERC-1271: how a contract says a signature is its own.
    #[sol(rpc)]
    interface Erc1271 {
        function isValidSignature(bytes32 hash, bytes signature) external view returns (bytes4 magicValue);
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
            valid_after: 0,
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
