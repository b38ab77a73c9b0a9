//! EIP-2612's `permit`: an ERC-20 holder lets a spender move its tokens by a signature instead of
//! an `approve` transaction. A payer by Permit2 whose token has it signs one for Permit2, and
//! x402's proxy submits it with the payment (`settleWithPermit`): the payer sends no transaction.

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{Eip712Domain, SolStruct},
};

use super::token;
use crate::rails::rpc::{ChainError, Node};

alloy::sol! {
    /// EIP-2612's message, field for field.
    #[derive(serde::Serialize)]
    struct Permit {
        address owner;
        address spender;
        uint256 value;
        uint256 nonce;
        uint256 deadline;
    }

    /// What a permit to sign needs of the token besides its domain.
    #[sol(rpc)]
    interface Eip2612Token {
        function nonces(address owner) external view returns (uint256);
    }
}

/// A permit to sign: `value` of `token` for `spender` to move from `owner`, under the token's
/// next `nonce` for `owner`, until `deadline` (unix seconds, inclusive), in the token's EIP-712
/// domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitTerms {
    pub chain_id: u64,
    pub token: Address,
    pub name: String,
    pub version: String,
    pub owner: Address,
    pub spender: Address,
    pub value: U256,
    pub nonce: U256,
    pub deadline: U256,
}

impl PermitTerms {
    fn domain(&self) -> Eip712Domain {
        token::eip712_domain(&self.name, &self.version, self.chain_id, self.token)
    }

    fn message(&self) -> Permit {
        Permit {
            owner: self.owner,
            spender: self.spender,
            value: self.value,
            nonce: self.nonce,
            deadline: self.deadline,
        }
    }

    /// The EIP-712 digest the owner signs.
    pub fn digest(&self) -> B256 {
        self.message().eip712_signing_hash(&self.domain())
    }

    /// The document `eth_signTypedData_v4` takes, written as the other documents we hand out:
    /// `chainId` a number, uint256s decimal strings, addresses EIP-55.
    pub fn typed_data(&self) -> serde_json::Value {
        let typed = alloy::dyn_abi::TypedData::from_struct(&self.message(), Some(self.domain()));
        let mut document = serde_json::to_value(typed).expect("typed data serializes");
        document["domain"]["chainId"] = self.chain_id.into();
        document["domain"]["verifyingContract"] = self.token.to_checksum(None).into();
        let message = &mut document["message"];
        message["owner"] = self.owner.to_checksum(None).into();
        message["spender"] = self.spender.to_checksum(None).into();
        message["value"] = self.value.to_string().into();
        message["nonce"] = self.nonce.to_string().into();
        message["deadline"] = self.deadline.to_string().into();
        document
    }
}

/// The permit `owner` would sign now for `spender` to move `value` of `token` until `deadline`,
/// if the token has EIP-2612: an EIP-712 domain that reproduces its `DOMAIN_SEPARATOR()`, and
/// `nonces(owner)`. `Ok(None)` if it has not.
pub async fn terms(
    node: &Node,
    chain_id: u64,
    token: Address,
    owner: Address,
    spender: Address,
    value: U256,
    deadline: U256,
) -> Result<Option<PermitTerms>, ChainError> {
    let Ok((name, version)) = token::domain_of(node, chain_id, token).await? else {
        return Ok(None);
    };
    let nonce = match Eip2612Token::new(token, node).nonces(owner).call().await {
        Ok(nonce) => nonce,
        Err(e) => match ChainError::from(e) {
            ChainError::Unreachable(why) => return Err(ChainError::Unreachable(why)),
            _ => return Ok(None),
        },
    };
    Ok(Some(PermitTerms {
        chain_id,
        token,
        name,
        version,
        owner,
        spender,
        value,
        nonce,
        deadline,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_a_wallet_signs_has_the_digest_we_check() {
        let terms = PermitTerms {
            chain_id: 31337,
            token: Address::repeat_byte(1),
            name: "Permit USD".to_owned(),
            version: "1".to_owned(),
            owner: Address::repeat_byte(2),
            spender: Address::repeat_byte(3),
            value: U256::from(25_000_000u64),
            nonce: U256::from(4),
            deadline: U256::from(1_800_000_000u64),
        };
        let document = terms.typed_data();
        assert_eq!(document["primaryType"], "Permit");
        assert_eq!(document["message"]["value"], "25000000");
        let parsed: alloy::dyn_abi::TypedData = serde_json::from_value(document).unwrap();
        assert_eq!(parsed.eip712_signing_hash().unwrap(), terms.digest());
    }
}
