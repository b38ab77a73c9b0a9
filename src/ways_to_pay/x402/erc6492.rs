//! Payers whose smart wallet is not deployed yet (ERC-6492), as the reference facilitator serves
//! them (`@x402/evm`'s `classifyErc6492Payer`): the signature carries the factory call that
//! deploys the wallet. Only factories the operator allows (`X402_ERC6492_FACTORIES`) are taken;
//! the signature is checked by simulating the deployment and the payment together; the settle
//! queues the deployment first and the payment after it (`docs/x402.md`, "ERC-6492").

use alloy::primitives::{Address, Bytes};
use sqlx::PgConnection;

use super::exact_evm::Refusal;
use crate::{
    intents::payment::IntentPayment,
    rails::{
        evm::{authorization, erc6492},
        outbox::{BoxFuture, NewSubmission, SubmissionKind, Wanted},
        rpc::{ChainError, Node},
    },
};

/// The outbox kind of a wallet's deployment: its subject is the intent whose payment needs it.
pub const KIND: &str = "wallet_deployment";

/// How a payment's signature is checked.
pub enum Signature {
    /// As a key's or a deployed wallet's (the inner one, when an ERC-6492 envelope came for a
    /// wallet deployed since).
    AsSigned(String),
    /// After deploying the wallet, in a simulation.
    Counterfactual(erc6492::Wrapped),
}

/// Reads `signature` of `payer` as the reference does: an ERC-6492 envelope counts only while the
/// payer has no code, and then only for an allowed factory (`eip6492_factory_not_allowed`).
pub async fn classify(
    node: &Node,
    allowed: &[Address],
    payer: Address,
    signature: &str,
) -> Result<Result<Signature, Refusal>, ChainError> {
    use alloy::providers::Provider;
    let Some(wrapped) = authorization::signature_bytes(signature)
        .ok()
        .and_then(|bytes| erc6492::unwrap(&bytes))
    else {
        return Ok(Ok(Signature::AsSigned(signature.to_owned())));
    };
    if !node.get_code_at(payer).await?.is_empty() {
        return Ok(Ok(Signature::AsSigned(wrapped.signature.to_string())));
    }
    let factory = wrapped.deployment.factory;
    if !allowed.contains(&factory) {
        return Ok(Err((
            "eip6492_factory_not_allowed",
            format!(
                "the payer {payer} is not deployed, and its factory {factory} is not one this facilitator deploys wallets with (X402_ERC6492_FACTORIES)"
            ),
        )));
    }
    Ok(Ok(Signature::Counterfactual(wrapped)))
}

/// The deployment of `wallet` on `chain_id`, for the payment of intent `subject`: one per wallet,
/// however many payments wait for it.
pub fn submission<'a>(
    subject: &'a str,
    chain_id: u64,
    wallet: Address,
    deployment: &erc6492::Deployment,
) -> NewSubmission<'a> {
    NewSubmission {
        kind: KIND,
        subject,
        chain_id,
        dedupe_key: format!("erc6492:{wallet}"),
        target: deployment.factory,
        calldata: Bytes::clone(&deployment.calldata),
        sender: None,
        after: None,
    }
}

/// A wallet's deployment: wanted while the payment that needs it is, done once mined.
pub struct WalletDeployment;

impl SubmissionKind for WalletDeployment {
    fn name(&self) -> &'static str {
        KIND
    }

    fn still_wanted<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        subject: &'a str,
    ) -> BoxFuture<'a, Result<Wanted, sqlx::Error>> {
        IntentPayment.still_wanted(conn, subject)
    }

    fn done_when_mined(&self) -> bool {
        true
    }
}
