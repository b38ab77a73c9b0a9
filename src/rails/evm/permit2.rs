//! Permit2 and x402's Permit2 proxies: contracts that live at the same address on every chain, so
//! a signature names them by that address. Real chains have them; a devnet gets them from
//! [`place`], which writes each one's runtime code (built from the vendored sources into
//! `contracts/build/`) at its address with `anvil_setCode`, its immutables filled in as its
//! constructor would have filled them there (`docs/settlement.md`, "Permit2 on the devnet").

use std::collections::BTreeMap;

use alloy::{
    primitives::{Address, B256, Bytes, U256, address, b256},
    providers::{Provider, ProviderBuilder},
    sol_types::eip712_domain,
};
use anyhow::{Context, bail};
use serde::Deserialize;

use crate::rails::{
    evm::authorization::{PayerSignature, WalletAnswer, ask_wallet, signature_bytes},
    outbox::{Hold, Revert},
    rpc::{ChainError, Node},
};

/// Uniswap's Permit2, at its canonical address.
pub const PERMIT2: Address = address!("0x000000000022D473030F116dDEE9F6B43aC78BA3");
/// x402's proxy for the `exact` scheme by Permit2: the spender a payer's signature names.
pub const X402_EXACT_PROXY: Address = address!("0x402085c248EeA27D92E8b30b2C58ed07f9E20001");
/// x402's proxy for the `upto` scheme.
pub const X402_UPTO_PROXY: Address = address!("0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");

/// OpenZeppelin 5.5's `ReentrancyGuard` status slot (ERC-7201), which the proxies' constructor
/// sets to 1 (not entered): written so, a placed proxy costs the gas of a deployed one.
const REENTRANCY_STATUS_SLOT: B256 =
    b256!("0x9b779b17422d0df92223018b32b4d1fa46e071723d6817e2486d003becc55f00");

/// Permit2's EIP-712 domain on `chain_id`: a name, no version.
fn permit2_domain(chain_id: u64) -> alloy::sol_types::Eip712Domain {
    eip712_domain! {
        name: "Permit2",
        chain_id: chain_id,
        verifying_contract: PERMIT2,
    }
}

/// Permit2's EIP-712 domain separator on `chain_id`.
pub fn permit2_domain_separator(chain_id: u64) -> B256 {
    permit2_domain(chain_id).separator()
}

mod bindings {
    alloy::sol! {
        #[sol(rpc)]
        X402ExactPermit2Proxy,
        "contracts/build/x402ExactPermit2Proxy.json"
    }
}
pub use bindings::X402ExactPermit2Proxy;

mod upto_bindings {
    alloy::sol! {
        X402UptoPermit2Proxy,
        "contracts/build/x402UptoPermit2Proxy.json"
    }
}
use upto_bindings::X402UptoPermit2Proxy;

/// What a payer signs for x402's `exact` proxy: Permit2's `PermitWitnessTransferFrom`, its witness
/// the proxy's (`Witness(address to,uint256 validAfter)`), field for field.
pub mod exact {
    alloy::sol! {
        #[derive(Debug, PartialEq, Eq, serde::Serialize)]
        struct TokenPermissions {
            address token;
            uint256 amount;
        }
        #[derive(Debug, PartialEq, Eq, serde::Serialize)]
        struct Witness {
            address to;
            uint256 validAfter;
        }
        #[derive(Debug, PartialEq, Eq, serde::Serialize)]
        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }
    }
}

/// What a payer signs for x402's `upto` proxy: the same, its witness also naming the only
/// facilitator that may settle it (`Witness(address to,address facilitator,uint256 validAfter)`).
pub mod upto {
    alloy::sol! {
        #[derive(Debug, PartialEq, Eq)]
        struct TokenPermissions {
            address token;
            uint256 amount;
        }
        #[derive(Debug, PartialEq, Eq)]
        struct Witness {
            address to;
            address facilitator;
            uint256 validAfter;
        }
        #[derive(Debug, PartialEq, Eq)]
        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }
    }
}

/// One payment by Permit2 through one of x402's proxies: `amount` of `token` from `owner` to `to`
/// (all of it through the `exact` proxy; at most that through the `upto` proxy, and only by
/// `facilitator`), not before `valid_after`, not after `deadline` (unix seconds, inclusive), under
/// `nonce`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyPermit {
    pub chain_id: u64,
    pub token: Address,
    pub amount: U256,
    pub owner: Address,
    pub to: Address,
    pub nonce: U256,
    pub deadline: U256,
    pub valid_after: U256,
    /// `None` for the `exact` scheme; for `upto`, the one address that may settle it.
    pub facilitator: Option<Address>,
    /// The owner's EIP-2612 permit letting Permit2 move `amount`, which the proxy's
    /// `settleWithPermit` submits first: the owner then needs no approval of its own.
    pub token_permit: Option<TokenPermit>,
}

/// A token's EIP-2612 `permit(owner, Permit2, value, deadline, v, r, s)`, signed by the owner, as
/// x402's proxies take it (`EIP2612Permit`). A permit that fails does not stop the settle (the
/// proxy goes on with what allowance there is), so it is checked by simulating the settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenPermit {
    pub value: U256,
    pub deadline: U256,
    /// `r || s || v`, v 27 or 28.
    pub signature: [u8; 65],
}

impl TokenPermit {
    fn exact(&self) -> bindings::x402BasePermit2Proxy::EIP2612Permit {
        let s = &self.signature;
        bindings::x402BasePermit2Proxy::EIP2612Permit {
            value: self.value,
            deadline: self.deadline,
            r: B256::from_slice(&s[..32]),
            s: B256::from_slice(&s[32..64]),
            v: s[64],
        }
    }

    fn upto(&self) -> upto_bindings::x402BasePermit2Proxy::EIP2612Permit {
        let p = self.exact();
        upto_bindings::x402BasePermit2Proxy::EIP2612Permit {
            value: p.value,
            deadline: p.deadline,
            r: p.r,
            s: p.s,
            v: p.v,
        }
    }

    fn of_exact(p: &bindings::x402BasePermit2Proxy::EIP2612Permit) -> Self {
        let mut signature = [0u8; 65];
        signature[..32].copy_from_slice(p.r.as_slice());
        signature[32..64].copy_from_slice(p.s.as_slice());
        signature[64] = p.v;
        Self {
            value: p.value,
            deadline: p.deadline,
            signature,
        }
    }

    fn of_upto(p: &upto_bindings::x402BasePermit2Proxy::EIP2612Permit) -> Self {
        Self::of_exact(&bindings::x402BasePermit2Proxy::EIP2612Permit {
            value: p.value,
            deadline: p.deadline,
            r: p.r,
            s: p.s,
            v: p.v,
        })
    }
}

impl ProxyPermit {
    /// The proxy the permit names as its spender.
    pub fn spender(&self) -> Address {
        match self.facilitator {
            None => X402_EXACT_PROXY,
            Some(_) => X402_UPTO_PROXY,
        }
    }

    fn exact_message(&self) -> exact::PermitWitnessTransferFrom {
        exact::PermitWitnessTransferFrom {
            permitted: exact::TokenPermissions {
                token: self.token,
                amount: self.amount,
            },
            spender: X402_EXACT_PROXY,
            nonce: self.nonce,
            deadline: self.deadline,
            witness: exact::Witness {
                to: self.to,
                validAfter: self.valid_after,
            },
        }
    }

    fn upto_message(&self, facilitator: Address) -> upto::PermitWitnessTransferFrom {
        upto::PermitWitnessTransferFrom {
            permitted: upto::TokenPermissions {
                token: self.token,
                amount: self.amount,
            },
            spender: X402_UPTO_PROXY,
            nonce: self.nonce,
            deadline: self.deadline,
            witness: upto::Witness {
                to: self.to,
                facilitator,
                validAfter: self.valid_after,
            },
        }
    }

    /// The EIP-712 digest the owner signs: Permit2's domain on its chain.
    pub fn digest(&self) -> B256 {
        use alloy::sol_types::SolStruct;
        let domain = permit2_domain(self.chain_id);
        match self.facilitator {
            None => self.exact_message().eip712_signing_hash(&domain),
            Some(facilitator) => self.upto_message(facilitator).eip712_signing_hash(&domain),
        }
    }

    /// The document `eth_signTypedData_v4` takes for an `exact` permit, written as
    /// `Authorization::typed_data` writes EIP-3009's: `chainId` a number, uint256s decimal strings.
    pub fn typed_data(&self) -> serde_json::Value {
        debug_assert!(self.facilitator.is_none(), "an exact permit");
        let typed = alloy::dyn_abi::TypedData::from_struct(
            &self.exact_message(),
            Some(permit2_domain(self.chain_id)),
        );
        let mut document = serde_json::to_value(typed).expect("typed data serializes");
        document["domain"]["chainId"] = self.chain_id.into();
        document["domain"]["verifyingContract"] = PERMIT2.to_checksum(None).into();
        let message = &mut document["message"];
        message["permitted"]["token"] = self.token.to_checksum(None).into();
        message["permitted"]["amount"] = self.amount.to_string().into();
        message["spender"] = X402_EXACT_PROXY.to_checksum(None).into();
        message["nonce"] = self.nonce.to_string().into();
        message["deadline"] = self.deadline.to_string().into();
        message["witness"]["to"] = self.to.to_checksum(None).into();
        message["witness"]["validAfter"] = self.valid_after.to_string().into();
        document
    }

    /// The proxy's `settle`, charging `charged`: `settle(permit, owner, witness, signature)` of the
    /// exact proxy (anyone may send it; it moves the whole amount, so `charged` is that), or
    /// `settle(permit, amount, owner, witness, signature)` of the upto proxy (only its facilitator).
    pub fn settle_calldata(&self, charged: U256, signature: Bytes) -> Bytes {
        use alloy::sol_types::SolCall;
        let permit = bindings::ISignatureTransfer::PermitTransferFrom {
            permitted: bindings::ISignatureTransfer::TokenPermissions {
                token: self.token,
                amount: self.amount,
            },
            nonce: self.nonce,
            deadline: self.deadline,
        };
        let owner = self.owner;
        match (self.facilitator, &self.token_permit) {
            (None, token_permit) => {
                let witness = bindings::x402ExactPermit2Proxy::Witness {
                    to: self.to,
                    validAfter: self.valid_after,
                };
                match token_permit {
                    None => X402ExactPermit2Proxy::settleCall {
                        permit,
                        owner,
                        witness,
                        signature,
                    }
                    .abi_encode(),
                    Some(token_permit) => X402ExactPermit2Proxy::settleWithPermitCall {
                        permit2612: token_permit.exact(),
                        permit,
                        owner,
                        witness,
                        signature,
                    }
                    .abi_encode(),
                }
                .into()
            }
            (Some(facilitator), token_permit) => {
                let permit = upto_bindings::ISignatureTransfer::PermitTransferFrom {
                    permitted: upto_bindings::ISignatureTransfer::TokenPermissions {
                        token: permit.permitted.token,
                        amount: permit.permitted.amount,
                    },
                    nonce: permit.nonce,
                    deadline: permit.deadline,
                };
                let witness = upto_bindings::x402UptoPermit2Proxy::Witness {
                    to: self.to,
                    facilitator,
                    validAfter: self.valid_after,
                };
                match token_permit {
                    None => X402UptoPermit2Proxy::settleCall {
                        permit,
                        amount: charged,
                        owner,
                        witness,
                        signature,
                    }
                    .abi_encode(),
                    Some(token_permit) => X402UptoPermit2Proxy::settleWithPermitCall {
                        permit2612: token_permit.upto(),
                        permit,
                        amount: charged,
                        owner,
                        witness,
                        signature,
                    }
                    .abi_encode(),
                }
                .into()
            }
        }
    }

    /// The permit a call of a proxy's (`to`) `settle` on `chain_id` carries, and what it charges,
    /// if `calldata` is one.
    pub fn of_settle_calldata(chain_id: u64, to: Address, calldata: &[u8]) -> Option<(Self, U256)> {
        use alloy::sol_types::SolCall;
        // The fields both proxies' calls carry alike.
        let permit = |token, amount, nonce, deadline, owner, to, valid_after, facilitator| Self {
            chain_id,
            token,
            amount,
            owner,
            to,
            nonce,
            deadline,
            valid_after,
            facilitator,
            token_permit: None,
        };
        // `settle`, or `settleWithPermit` (an EIP-2612 permit first, which anyone may send with a
        // permit that fails: the payment is made all the same).
        if to == X402_EXACT_PROXY {
            use X402ExactPermit2Proxy::{settleCall, settleWithPermitCall};
            let (p, owner, w, token_permit) = match settleCall::abi_decode(calldata) {
                Ok(c) => (c.permit, c.owner, c.witness, None),
                Err(_) => {
                    let c = settleWithPermitCall::abi_decode(calldata).ok()?;
                    let token_permit = TokenPermit::of_exact(&c.permit2612);
                    (c.permit, c.owner, c.witness, Some(token_permit))
                }
            };
            let amount = p.permitted.amount;
            let mut permit = permit(
                p.permitted.token,
                amount,
                p.nonce,
                p.deadline,
                owner,
                w.to,
                w.validAfter,
                None,
            );
            permit.token_permit = token_permit;
            Some((permit, amount))
        } else if to == X402_UPTO_PROXY {
            use X402UptoPermit2Proxy::{settleCall, settleWithPermitCall};
            let (p, charged, owner, w, token_permit) = match settleCall::abi_decode(calldata) {
                Ok(c) => (c.permit, c.amount, c.owner, c.witness, None),
                Err(_) => {
                    let c = settleWithPermitCall::abi_decode(calldata).ok()?;
                    let token_permit = TokenPermit::of_upto(&c.permit2612);
                    (c.permit, c.amount, c.owner, c.witness, Some(token_permit))
                }
            };
            let facilitator = Some(w.facilitator);
            let mut permit = permit(
                p.permitted.token,
                p.permitted.amount,
                p.nonce,
                p.deadline,
                owner,
                w.to,
                w.validAfter,
                facilitator,
            );
            permit.token_permit = token_permit;
            Some((permit, charged))
        } else {
            None
        }
    }
}

/// What both proxies log after each transfer they make: `Settled()`, or `SettledWithPermit()`
/// after `settleWithPermit`.
pub fn settled_topics() -> [B256; 2] {
    use alloy::sol_types::SolEvent;
    [
        X402ExactPermit2Proxy::Settled::SIGNATURE_HASH,
        X402ExactPermit2Proxy::SettledWithPermit::SIGNATURE_HASH,
    ]
}

/// What Permit2 (`PermitErrors`, `SignatureVerification`) and x402's proxies revert with, by
/// custom error: how a relayer reads a settle's revert.
mod errors {
    alloy::sol! {
        error InvalidNonce();
        error SignatureExpired(uint256 signatureDeadline);
        error InvalidSignature();
        error InvalidSigner();
        error InvalidSignatureLength();
        error InvalidContractSignature();
    }
}

/// What a revert of a settle through x402's exact proxy says, if it is Permit2's or the proxy's
/// own word: `None` for anything else (a token's own revert).
pub fn revert_of(reason: &str) -> Option<Revert> {
    use alloy::sol_types::SolError;
    use errors::*;
    let reason = reason.to_ascii_lowercase();
    let said = |selector: [u8; 4]| reason.contains(&alloy::hex::encode(selector));
    if said(InvalidNonce::SELECTOR) || said(SignatureExpired::SELECTOR) {
        Some(Revert::Spent)
    } else if [
        InvalidSignature::SELECTOR,
        InvalidSigner::SELECTOR,
        InvalidSignatureLength::SELECTOR,
        InvalidContractSignature::SELECTOR,
    ]
    .into_iter()
    .any(said)
    {
        Some(Revert::SignatureRefused)
    } else if reason.contains("transfer_from_failed") {
        // solmate's safeTransferFrom, which Permit2 moves the token with, does not say whether the
        // balance or the allowance fell short: held either way until the deadline.
        Some(Revert::NotYet(Hold::InsufficientBalance))
    } else {
        None
    }
}

alloy::sol! {
    /// What a Permit2 payment's checks read of its token, and the approval its payer sends.
    #[sol(rpc)]
    interface Permit2Token {
        function balanceOf(address owner) external view returns (uint256);
        function allowance(address owner, address spender) external view returns (uint256);
        function approve(address spender, uint256 amount) external returns (bool);
    }
}

/// The calldata of a token's `approve(Permit2, amount)`.
pub fn approve_calldata(amount: U256) -> Bytes {
    use alloy::sol_types::SolCall;
    Permit2Token::approveCall {
        spender: PERMIT2,
        amount,
    }
    .abi_encode()
    .into()
}

/// What the token says of a Permit2 payment's owner: its balance, and what it lets Permit2 move.
pub async fn owner_funds(
    node: &Node,
    token: Address,
    owner: Address,
) -> Result<(U256, U256), ChainError> {
    let token = Permit2Token::new(token, node);
    let balance = token.balanceOf(owner).call().await?;
    let allowance = token.allowance(owner, PERMIT2).call().await?;
    Ok((balance, allowance))
}

/// Asks the permit's proxy, by `eth_call` of the settle charging `charged` (sent by the upto
/// permit's facilitator, which alone may send it), whether it would pay now: `Ok(None)` if so,
/// `Ok(Some(reason))` with its revert if not.
pub async fn simulate_settle(
    node: &Node,
    permit: &ProxyPermit,
    charged: U256,
    signature: Bytes,
) -> Result<Option<String>, ChainError> {
    let calldata = permit.settle_calldata(charged, signature);
    crate::rails::rpc::simulate(node, permit.facilitator, permit.spender(), calldata).await
}

/// The owner's signature of the permit: its key's (65 bytes, v 27 or 28, as Permit2's `ecrecover`
/// takes it), or its contract wallet's by ERC-1271, asked on chain as Permit2 asks it. `Ok(Err)`
/// says why it is not.
pub async fn owner_signed(
    node: &Node,
    permit: &ProxyPermit,
    raw: &str,
) -> Result<Result<Bytes, String>, ChainError> {
    let bytes = match signature_bytes(raw) {
        Ok(bytes) => bytes,
        Err(why) => return Ok(Err(format!("signature: {why}"))),
    };
    let digest = permit.digest();
    let parsed = PayerSignature::parse(raw);
    let by_key = parsed.clone().and_then(|s| s.signer(&digest));
    if let (Ok(signature), Ok(signer)) = (&parsed, &by_key)
        && *signer == permit.owner
    {
        // As Permit2's `ecrecover` takes it: v 27 or 28, whichever form the client sent.
        return Ok(Ok(Bytes::from(signature.to_bytes())));
    }
    Ok(
        match ask_wallet(node, permit.owner, digest, &bytes).await? {
            WalletAnswer::Accepts => Ok(bytes),
            WalletAnswer::Refuses => Err(format!(
                "the owner {} is a contract wallet and refuses it (ERC-1271 isValidSignature)",
                permit.owner
            )),
            WalletAnswer::NotAContract => Err(match by_key {
                Ok(signer) => format!("signed by {signer}, not by the owner {}", permit.owner),
                Err(why) => format!("signature: {why}"),
            }),
        },
    )
}

/// Why a signed permit would not pay now, named as the first shortfall found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shortfall {
    /// The owner holds less than the permit moves.
    Balance(U256),
    /// The owner lets Permit2 move less than that: it must approve Permit2 first.
    Allowance(U256),
    /// The proxy refuses it for another reason (a spent nonce, a paused token): its revert.
    Refused(String),
}

/// Whether the proxy would settle the signed permit, charging `charged`, now: `Ok(None)` if so.
/// Asked by simulating the settle; a refusal is then named by what the token says of the owner's
/// funds (a token that does not answer those leaves the simulation's word).
pub async fn shortfall(
    node: &Node,
    permit: &ProxyPermit,
    charged: U256,
    signature: Bytes,
) -> Result<Option<Shortfall>, ChainError> {
    let Some(reason) = simulate_settle(node, permit, charged, signature).await? else {
        return Ok(None);
    };
    let (balance, allowance) = match owner_funds(node, permit.token, permit.owner).await {
        Ok(funds) => funds,
        Err(ChainError::Reverted { .. }) => (U256::MAX, U256::MAX),
        Err(e) => return Err(e),
    };
    Ok(Some(if balance < charged {
        Shortfall::Balance(balance)
    } else if allowance < charged {
        Shortfall::Allowance(allowance)
    } else {
        Shortfall::Refused(reason)
    }))
}

/// A committed artifact of a contract placed at its address: its runtime code and where in it
/// each immutable's 32 bytes go.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Placed {
    deployed_bytecode: Bytes,
    immutable_references: BTreeMap<String, Vec<Reference>>,
}

#[derive(Deserialize)]
struct Reference {
    start: usize,
    length: usize,
}

impl Placed {
    fn from_artifact(json: &str) -> Self {
        serde_json::from_str(json).expect("a committed artifact")
    }

    /// The runtime code with each immutable set to its value; every immutable must be given.
    fn runtime(&self, values: &[(&str, B256)]) -> Bytes {
        let mut code = self.deployed_bytecode.to_vec();
        for (name, references) in &self.immutable_references {
            let (_, value) = values
                .iter()
                .find(|(given, _)| given == name)
                .unwrap_or_else(|| panic!("no value for the immutable {name}"));
            for reference in references {
                assert_eq!(reference.length, 32, "an immutable takes one word");
                code[reference.start..reference.start + 32].copy_from_slice(value.as_slice());
            }
        }
        code.into()
    }
}

/// The code each contract has at its address on chain `chain_id`.
pub fn runtimes(chain_id: u64) -> [(Address, Bytes); 3] {
    let permit2 = Placed::from_artifact(include_str!("../../../contracts/build/Permit2.json"));
    let exact = Placed::from_artifact(include_str!(
        "../../../contracts/build/x402ExactPermit2Proxy.json"
    ));
    let upto = Placed::from_artifact(include_str!(
        "../../../contracts/build/x402UptoPermit2Proxy.json"
    ));
    let permit2_word = PERMIT2.into_word();
    [
        (
            PERMIT2,
            permit2.runtime(&[
                ("_CACHED_CHAIN_ID", U256::from(chain_id).into()),
                (
                    "_CACHED_DOMAIN_SEPARATOR",
                    permit2_domain_separator(chain_id),
                ),
            ]),
        ),
        (
            X402_EXACT_PROXY,
            exact.runtime(&[("PERMIT2", permit2_word)]),
        ),
        (X402_UPTO_PROXY, upto.runtime(&[("PERMIT2", permit2_word)])),
    ]
}

/// Places Permit2 and both proxies on the anvil at `rpc_url`; `false` if they were there already.
pub async fn place(rpc_url: &url::Url) -> anyhow::Result<bool> {
    let node = ProviderBuilder::new().connect_http(rpc_url.clone());
    let chain_id = node
        .get_chain_id()
        .await
        .with_context(|| format!("cannot reach the chain at {rpc_url}"))?;
    let mut placed = false;
    for (at, runtime) in runtimes(chain_id) {
        let code = node.get_code_at(at).await?;
        if code == runtime {
            continue;
        }
        if !code.is_empty() {
            bail!("{at} holds other code than the one this devnet places there");
        }
        let () = node
            .raw_request("anvil_setCode".into(), (at, &runtime))
            .await
            .with_context(|| format!("placing the code of {at} (anvil_setCode)"))?;
        if at != PERMIT2 {
            let _: bool = node
                .raw_request(
                    "anvil_setStorageAt".into(),
                    (at, REENTRANCY_STATUS_SLOT, B256::from(U256::from(1))),
                )
                .await
                .with_context(|| format!("setting the reentrancy status of {at}"))?;
        }
        placed = true;
    }
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use alloy::sol_types::SolCall;

    use super::*;

    /// Permit2's domain on chain 1 is the one mainnet's Permit2 answers.
    #[test]
    fn the_domain_separator_is_mainnets_on_chain_1() {
        assert_eq!(
            permit2_domain_separator(1),
            b256!("0x866a5aba21966af95d6c7ab78eb2b2fc913915c28be3b9aa07cc04ff903e3f28")
        );
    }

    /// What the relayer sends is what the watch reads back: with the token's permit, the proxy's
    /// `settleWithPermit`, for either scheme.
    #[test]
    fn a_settle_with_the_tokens_permit_reads_back_as_sent() {
        let token_permit = TokenPermit {
            value: U256::from(10_000),
            deadline: U256::from(2_000_000_000u64),
            signature: [7; 65],
        };
        for facilitator in [None, Some(Address::repeat_byte(9))] {
            let permit = ProxyPermit {
                chain_id: 31337,
                token: Address::repeat_byte(1),
                amount: U256::from(10_000),
                owner: Address::repeat_byte(2),
                to: Address::repeat_byte(3),
                nonce: U256::from(42),
                deadline: U256::from(2_000_000_000u64),
                valid_after: U256::ZERO,
                facilitator,
                token_permit: Some(token_permit.clone()),
            };
            let charged = U256::from(2_500);
            let calldata = permit.settle_calldata(charged, Bytes::from(vec![1; 65]));
            let selector = match facilitator {
                None => X402ExactPermit2Proxy::settleWithPermitCall::SELECTOR,
                Some(_) => X402UptoPermit2Proxy::settleWithPermitCall::SELECTOR,
            };
            assert_eq!(calldata[..4], selector);
            let (read, read_charge) =
                ProxyPermit::of_settle_calldata(31337, permit.spender(), &calldata).unwrap();
            assert_eq!(read, permit);
            let whole = if facilitator.is_some() {
                charged
            } else {
                permit.amount
            };
            assert_eq!(read_charge, whole);
        }
    }

    #[test]
    fn every_immutable_is_filled_and_nothing_else_moves() {
        let [(_, permit2), (_, exact), _] = runtimes(31337);
        let artifact = Placed::from_artifact(include_str!("../../../contracts/build/Permit2.json"));
        assert_eq!(permit2.len(), artifact.deployed_bytecode.len());
        let separator = permit2_domain_separator(31337);
        let at = artifact.immutable_references["_CACHED_DOMAIN_SEPARATOR"][0].start;
        assert_eq!(&permit2[at..at + 32], separator.as_slice());
        let proxy = Placed::from_artifact(include_str!(
            "../../../contracts/build/x402ExactPermit2Proxy.json"
        ));
        for reference in &proxy.immutable_references["PERMIT2"] {
            assert_eq!(
                &exact[reference.start + 12..reference.start + 32],
                PERMIT2.as_slice()
            );
        }
    }
}
