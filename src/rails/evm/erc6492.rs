//! ERC-6492: the signature of a contract wallet that is not deployed yet. It wraps the wallet's
//! own signature with the call that deploys it (`factory`, `calldata`), so a verifier can deploy
//! the wallet in a simulation and ask it; the wallet is deployed for real before anything that
//! needs its signature is sent.

use alloy::{
    primitives::{Address, B256, Bytes, b256},
    rpc::types::{
        TransactionRequest,
        simulate::{SimBlock, SimulatePayload},
    },
    sol_types::SolValue,
};

use crate::rails::rpc::{ChainError, Node};

/// The 32 bytes an ERC-6492 signature ends with.
pub const MAGIC: B256 = b256!("6492649264926492649264926492649264926492649264926492649264926492");

/// The call that deploys a wallet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    pub factory: Address,
    pub calldata: Bytes,
}

/// An ERC-6492 signature, unwrapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrapped {
    pub deployment: Deployment,
    /// What the wallet checks once deployed.
    pub signature: Bytes,
}

/// The deployment and the inner signature of `signature`, if it is ERC-6492's
/// `abi.encode(factory, factoryCalldata, signature) ‖ MAGIC`.
pub fn unwrap(signature: &[u8]) -> Option<Wrapped> {
    let body = signature.strip_suffix(MAGIC.as_slice())?;
    let (factory, calldata, signature) = <(Address, Bytes, Bytes)>::abi_decode_params(body).ok()?;
    Some(Wrapped {
        deployment: Deployment { factory, calldata },
        signature,
    })
}

/// What a simulation after a deployment said.
#[derive(Debug)]
pub enum Simulated {
    /// The deployment itself reverted, for this reason.
    DeploymentFailed(String),
    /// Each call's outcome, in order: its return data, or its revert reason.
    Calls(Vec<Result<Bytes, String>>),
}

/// Asks the node what `calls` would do once `deployment` ran, all in one simulated block at the
/// latest one (`eth_simulateV1`): nothing is sent.
pub async fn simulate_after(
    node: &Node,
    deployment: &Deployment,
    calls: &[(Address, Bytes)],
) -> Result<Simulated, ChainError> {
    use alloy::{network::TransactionBuilder, providers::Provider};
    let call = |to: Address, data: &Bytes| {
        TransactionRequest::default()
            .with_to(to)
            .with_input(data.clone())
    };
    let payload = SimulatePayload {
        block_state_calls: vec![SimBlock {
            block_overrides: None,
            state_overrides: None,
            calls: std::iter::once(call(deployment.factory, &deployment.calldata))
                .chain(calls.iter().map(|(to, data)| call(*to, data)))
                .collect(),
        }],
        trace_transfers: false,
        validation: false,
        return_full_transactions: false,
    };
    let blocks = node.simulate(&payload).await?;
    let results = blocks
        .into_iter()
        .next()
        .map(|block| block.calls)
        .unwrap_or_default();
    let mut outcomes = results.into_iter().map(|result| {
        if result.status {
            Ok(result.return_data)
        } else {
            let message = result.error.map(|e| e.message).unwrap_or_default();
            Err(format!("{message} (data {})", result.return_data))
        }
    });
    match outcomes.next() {
        Some(Ok(_)) => {}
        Some(Err(reason)) => return Ok(Simulated::DeploymentFailed(reason)),
        None => {
            return Err(ChainError::Refused(
                "eth_simulateV1 returned no calls".into(),
            ));
        }
    }
    let outcomes: Vec<_> = outcomes.collect();
    if outcomes.len() != calls.len() {
        return Err(ChainError::Refused(format!(
            "eth_simulateV1 returned {} calls of {}",
            outcomes.len() + 1,
            calls.len() + 1
        )));
    }
    Ok(Simulated::Calls(outcomes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::{address, bytes};

    #[test]
    fn a_wrapped_signature_unwraps_to_its_deployment_and_signature() {
        let factory = address!("ba5ed110efdba3d005bfc882d75358acbbb85842");
        let calldata = bytes!("3ffba36f00");
        let inner = bytes!("aabbcc");
        let mut wrapped = (factory, calldata.clone(), inner.clone()).abi_encode_params();
        wrapped.extend_from_slice(MAGIC.as_slice());
        let unwrapped = unwrap(&wrapped).expect("an ERC-6492 signature");
        assert_eq!(unwrapped.deployment, Deployment { factory, calldata });
        assert_eq!(unwrapped.signature, inner);
    }

    #[test]
    fn a_plain_signature_or_a_bad_envelope_is_not_wrapped() {
        assert!(unwrap(&[0x11; 65]).is_none());
        let mut garbage = vec![0u8; 10];
        garbage.extend_from_slice(MAGIC.as_slice());
        assert!(unwrap(&garbage).is_none());
    }
}
