//! When an intent's time runs out: by the clock on a chain this server does not settle, by the
//! confirmed chain's time on one it does (`docs/settlement.md`, "Expiry"), and never while the
//! chain is settling it: what the ways to pay observed of it holds its expiry off.

use std::{convert::Infallible, sync::Arc};

use sqlx::PgConnection;

use super::repo::{self, Expiry};
use crate::{
    config::ChainEndpoint,
    rails::follower::{ConfirmedBlock, Watch},
    telemetry::metrics as names,
};

/// The observations of an intent (by kind; their subject is the intent's id) that keep it from
/// expiring: the chain settles it, and the observation's own block says whether in time.
#[derive(Debug, Clone, Default)]
pub struct ExpiryHolds {
    /// Held once one is observed: a nonce use or cancellation decides what the intent becomes.
    pub observed: Vec<&'static str>,
    /// Held while one is observed and not yet applied: an applied deposit has judged by its own
    /// block whether it came in time.
    pub unapplied: Vec<&'static str>,
}

impl ExpiryHolds {
    pub fn join(mut self, other: Self) -> Self {
        self.observed.extend(other.observed);
        self.unapplied.extend(other.unapplied);
        self
    }
}

/// Expiry by chain time, told of each confirmed block by the follower of every settled chain.
#[derive(Debug, Clone)]
pub struct ChainTimeExpiry {
    pub holds: Arc<ExpiryHolds>,
}

impl Watch for ChainTimeExpiry {
    type Outcome = Infallible;

    /// Expires the intents whose authorization the newest confirmed block's time has passed.
    async fn confirmed(
        &self,
        conn: &mut PgConnection,
        chain: &ChainEndpoint,
        block: ConfirmedBlock,
    ) -> Result<(), sqlx::Error> {
        let expiry = Expiry::ChainTime {
            chain: &chain.name,
            block_timestamp: block.timestamp,
            holds: &self.holds,
        };
        let expired = repo::expire_due(conn, crate::housekeeping::BATCH, &expiry).await?;
        if expired > 0 {
            metrics::counter!(names::SETTLEMENTS, "chain" => chain.name.clone(), "outcome" => "expired").increment(expired);
            tracing::info!(chain = %chain.name, expired, block.timestamp, "expired by chain time");
        }
        Ok(())
    }
}
