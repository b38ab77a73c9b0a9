//! Payments by Permit2: a client's `PermitWitnessTransferFrom`, signed for one of x402's proxies,
//! for a token without EIP-3009 (USDT, DAI, any ERC-20 the payer approved Permit2 for): the
//! `exact` scheme (the whole amount, by anyone) or the `upto` scheme (at most the amount, charged
//! by the facilitator the witness names). [`check`] checks it in the reference facilitator's
//! order (`@x402/evm`'s `verifyPermit2` and `verifyUptoPermit2`) and answers with its
//! `invalidReason` strings (`docs/x402.md`, "Permit2" and "upto").

use alloy::{
    primitives::{Address, Bytes, U256},
    providers::Provider,
};
use serde::Deserialize;

use super::{
    eip2612_gas_sponsoring,
    exact_evm::{
        LAST_VALID_BEFORE, Request, VerifyResponse, chain_time, required_chain, unavailable,
    },
};
use crate::{
    error::ApiError,
    rails::{
        Chains,
        evm::permit2::{self, ProxyPermit, Shortfall, X402_EXACT_PROXY, X402_UPTO_PROXY},
    },
};

/// The `exact` EVM payload by Permit2, as `@x402/evm` writes it: integers as decimal strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2Payload {
    pub signature: String,
    pub permit2_authorization: Permit2Authorization,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2Authorization {
    pub from: Address,
    pub permitted: Permitted,
    pub spender: Address,
    pub nonce: String,
    pub deadline: String,
    pub witness: ProxyWitness,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Permitted {
    pub token: Address,
    pub amount: String,
}

/// The proxy's witness: whom it pays, from when, and for `upto`, the one facilitator.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyWitness {
    pub to: Address,
    #[serde(default)]
    pub facilitator: Option<Address>,
    pub valid_after: String,
}

/// Whether a payload is a Permit2 one: by its shape, as the reference routes it.
pub fn is_permit2(request: &Request) -> bool {
    request
        .payment_payload
        .payload
        .get("permit2Authorization")
        .is_some()
}

/// A Permit2 payment that passed every check, and what settling it submits.
pub struct CheckedPermit {
    /// Our name of its chain (`evm:<id>`).
    pub chain: String,
    pub permit: ProxyPermit,
    pub signature: Bytes,
}

/// A Permit2 payment checked as the reference facilitator checks it (`docs/x402.md`, "Verify"),
/// or the reference's answer of why not. Read-only.
pub async fn check(
    chains: &Chains,
    request: &Request,
) -> Result<Result<CheckedPermit, VerifyResponse>, ApiError> {
    let (accepted, required) = (
        &request.payment_payload.accepted,
        &request.payment_requirements,
    );
    let Ok(payload) =
        serde_json::from_value::<Permit2Payload>(request.payment_payload.payload.clone())
    else {
        return Ok(Err(VerifyResponse::invalid(
            "unsupported_payload_type",
            None,
            "the payload is not a Permit2 authorization with its signature",
        )));
    };
    let a = &payload.permit2_authorization;
    let payer = Some(a.from);
    let invalid =
        |reason, message: String| Ok(Err(VerifyResponse::invalid(reason, payer, message)));
    let upto = required.scheme == "upto";
    if upto && accepted.scheme != "upto" {
        return invalid(
            "invalid_upto_evm_scheme",
            format!("accepted {}, required upto", accepted.scheme),
        );
    }
    if !upto && (accepted.scheme != "exact" || required.scheme != "exact") {
        return invalid(
            "unsupported_payload_type",
            "only the exact and upto schemes are served".into(),
        );
    }
    let (chain, (endpoint, node)) = match required_chain(chains, request) {
        Ok(served) => served,
        Err(("invalid_exact_evm_network_mismatch", why)) if upto => {
            return invalid("invalid_upto_evm_network_mismatch", why);
        }
        Err((reason, why)) => return invalid(reason, why),
    };
    let Ok(asset) = required.asset.parse::<Address>() else {
        return invalid(
            "invalid_exact_evm_payload",
            "the asset is not an address".into(),
        );
    };
    let (proxy, scheme) = if upto {
        (X402_UPTO_PROXY, "upto")
    } else {
        (X402_EXACT_PROXY, "exact")
    };
    if a.spender != proxy {
        return invalid(
            "invalid_permit2_spender",
            format!(
                "the permit's spender is {}, not x402's {scheme} proxy {proxy}",
                a.spender
            ),
        );
    }
    if required.pay_to.parse::<Address>().ok() != Some(a.witness.to) {
        return invalid(
            "invalid_permit2_recipient_mismatch",
            format!(
                "the witness pays {}, the requirements {}",
                a.witness.to, required.pay_to
            ),
        );
    }
    // The upto proxy settles only for the facilitator its payer named: one of our relayer keys.
    let facilitator = match (upto, a.witness.facilitator) {
        (false, _) => None,
        (true, Some(named)) if relays(chains, named) => Some(named),
        (true, named) => {
            return invalid(
                "upto_facilitator_mismatch",
                format!("the witness names {named:?} as its facilitator, not one of ours"),
            );
        }
    };
    let number = |raw: &str, what: &str| {
        raw.parse::<U256>()
            .map_err(|_| format!("{what} {raw:?} is not a decimal integer"))
    };
    let (amount, nonce, deadline, valid_after) = match (
        number(&a.permitted.amount, "permitted.amount"),
        number(&a.nonce, "nonce"),
        number(&a.deadline, "deadline"),
        number(&a.witness.valid_after, "witness.validAfter"),
    ) {
        (Ok(amount), Ok(nonce), Ok(deadline), Ok(after)) => (amount, nonce, deadline, after),
        (Err(why), ..) | (_, Err(why), ..) | (_, _, Err(why), _) | (.., Err(why)) => {
            return invalid("invalid_exact_evm_payload", why);
        }
    };
    // What a payment of ours can be: it moves something, and ends at a time a date can hold.
    if amount.is_zero() || deadline > U256::from(LAST_VALID_BEFORE) {
        return invalid(
            "invalid_exact_evm_payload",
            format!(
                "a permit must move something and end before the year 10000 (amount {amount}, deadline {deadline})"
            ),
        );
    }
    let now = chain_time(node, &chain).await?;
    // The chain's time, with the reference's margin of six seconds (`docs/x402.md`).
    if deadline < U256::from(now + 6) {
        return invalid(
            "permit2_deadline_expired",
            format!("the deadline {deadline} is past the chain's time {now} (plus 6 s)"),
        );
    }
    if valid_after > U256::from(now) {
        return invalid(
            "permit2_not_yet_valid",
            format!("validAfter {valid_after} is after the chain's time {now}"),
        );
    }
    if required.amount.parse::<U256>().ok() != Some(amount) {
        return invalid(
            "permit2_amount_mismatch",
            format!(
                "the permit moves {amount}, the requirements ask {}",
                required.amount
            ),
        );
    }
    if a.permitted.token != asset {
        return invalid(
            "permit2_token_mismatch",
            format!(
                "the permit moves {}, the requirements ask {asset}",
                a.permitted.token
            ),
        );
    }
    let mut permit = ProxyPermit {
        chain_id: endpoint.id,
        token: asset,
        amount,
        owner: a.from,
        to: a.witness.to,
        nonce,
        deadline,
        valid_after,
        facilitator,
        token_permit: None,
    };
    let code = node
        .get_code_at(asset)
        .await
        .map_err(|e| unavailable(&chain, e.into()))?;
    if code.is_empty() {
        return invalid(
            "asset_not_deployed_contract",
            format!("no contract at {asset} on {chain}"),
        );
    }
    let signature = match permit2::owner_signed(node, &permit, &payload.signature).await {
        Ok(Ok(signature)) => signature,
        Ok(Err(why)) => return invalid("invalid_permit2_signature", why),
        Err(e) => return Err(unavailable(&chain, e)),
    };
    // A permit of the token for Permit2, when the payer sent one: checked after the payment's own
    // signature, as the reference checks it, then submitted with the settle.
    if let Some(sponsored) = eip2612_gas_sponsoring::of(request) {
        match sponsored.check(a.from, asset, now) {
            Ok(token_permit) => permit.token_permit = Some(token_permit),
            Err((reason, why)) => return invalid(reason, why),
        }
    }
    // An `eth_call` to an address without code succeeds: the proxy must be there for the
    // simulation below to say anything.
    let code = node
        .get_code_at(proxy)
        .await
        .map_err(|e| unavailable(&chain, e.into()))?;
    if code.is_empty() {
        return invalid(
            "permit2_proxy_not_deployed",
            format!("x402's {scheme} proxy {proxy} is not on {chain}"),
        );
    }
    // What only the chain can say (the allowance, the balance, the nonce): the reference asks it
    // by simulating the settle, then names the first shortfall it finds.
    let short = permit2::shortfall(node, &permit, amount, signature.clone())
        .await
        .map_err(|e| unavailable(&chain, e))?;
    match short {
        None => {}
        Some(Shortfall::Balance(balance)) => {
            return invalid(
                "permit2_insufficient_balance",
                format!("the payer holds {balance}, the payment is {amount}"),
            );
        }
        Some(Shortfall::Allowance(allowance)) => {
            return invalid(
                "permit2_allowance_required",
                format!(
                    "the payer lets Permit2 move {allowance} of the token, the payment is {amount}: approve Permit2 first"
                ),
            );
        }
        Some(Shortfall::Refused(reason)) => {
            return invalid(
                "permit2_simulation_failed",
                format!("the proxy would refuse the settle: {reason}"),
            );
        }
    }
    Ok(Ok(CheckedPermit {
        chain,
        permit,
        signature,
    }))
}

/// Whether `address` is one of the relayer keys this server sends with.
fn relays(chains: &Chains, address: Address) -> bool {
    chains
        .relayer_keys()
        .is_ok_and(|keys| keys.iter().any(|key| key.address() == address))
}
