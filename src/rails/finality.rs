//! When a block is done, per chain (`CHAIN_FINALITY`, [`Finality`]): a number of confirmations,
//! or the chain's own `safe` or `finalized` head as its node reports it (`eth_getBlockByNumber`),
//! which is what done means on an OP-stack chain or on Ethereum since the merge. An intent
//! settles, a deposit counts, a refund succeeds and expiry by chain time is judged only at that
//! block.

use alloy::{eips::BlockNumberOrTag, providers::Provider};

use super::rpc::{ChainError, Node};
pub use crate::config::Finality;

/// The newest done block of `chain`, when `followed` is the newest block read of it: never above
/// it (what was not read cannot be done here). `None` while nothing is done yet (a young chain, a
/// node that reports no such head).
pub async fn done_up_to(
    finality: Finality,
    node: &Node,
    followed: u64,
) -> Result<Option<u64>, ChainError> {
    let tag = match finality {
        Finality::Confirmations(n) => return Ok((followed + 1).checked_sub(n)),
        Finality::Safe => BlockNumberOrTag::Safe,
        Finality::Finalized => BlockNumberOrTag::Finalized,
    };
    let block = node.get_block_by_number(tag).await?;
    Ok(block.map(|b| b.header.number.min(followed)))
}
