//! Wakes a chain's relayer when a confirm commits a submission for it, instead of at its next
//! poll: the confirm's transaction notifies `chain_submissions` with the chain id, and this worker,
//! one connection per replica listening on the server that takes writes, passes it on. A missed
//! notification (the connection was down) costs only the poll interval: the relayer still polls.

use std::{collections::HashMap, sync::Arc, time::Duration};

use sqlx::postgres::PgListener;
use tokio::sync::Notify;

use crate::{
    db::servers::Servers,
    workers::{Failed, Next, Schedule, Worker},
};

/// The channel the confirm's transaction notifies, with the chain id as payload.
pub const CHANNEL: &str = "chain_submissions";

/// How long one unit listens before it returns (and says it is alive).
const LISTEN_FOR: Duration = Duration::from_secs(10);

pub struct WakeupWorker {
    database_url: String,
    /// The relayer's wake-up per chain id.
    relayers: Arc<HashMap<u64, Arc<Notify>>>,
    listener: Option<PgListener>,
}

impl WakeupWorker {
    pub fn new(database_url: String, relayers: Arc<HashMap<u64, Arc<Notify>>>) -> Self {
        Self {
            database_url,
            relayers,
            listener: None,
        }
    }

    /// A unit listens for up to ten seconds and starts the next at once.
    pub fn schedule() -> Schedule {
        Schedule::every(LISTEN_FOR)
    }

    /// Listens on the server that takes writes now (a standby cannot `LISTEN`, and never sees
    /// a `NOTIFY`), found anew after every lost connection.
    async fn connect(&self) -> anyhow::Result<PgListener> {
        let servers: Servers = self.database_url.parse()?;
        let mut listener = PgListener::connect(&servers.writable_url().await?).await?;
        listener.listen(CHANNEL).await?;
        Ok(listener)
    }
}

impl Worker for WakeupWorker {
    async fn run_once(&mut self) -> Result<Next, Failed> {
        let listener = match &mut self.listener {
            Some(listener) => listener,
            None => {
                let listener = self.connect().await?;
                // Whatever was committed while nobody listened: each relayer looks once.
                self.relayers.values().for_each(|wake| wake.notify_one());
                self.listener.insert(listener)
            }
        };
        match tokio::time::timeout(LISTEN_FOR, listener.try_recv()).await {
            Err(_) => Ok(Next::Again),
            Ok(Ok(Some(notification))) => {
                let chain = notification.payload().parse::<u64>().ok();
                if let Some(wake) = chain.and_then(|id| self.relayers.get(&id)) {
                    wake.notify_one();
                }
                Ok(Next::Again)
            }
            // The connection was lost: connect again, to whichever server takes writes now.
            Ok(Ok(None)) => {
                self.listener = None;
                Ok(Next::Again)
            }
            Ok(Err(e)) => {
                self.listener = None;
                Err(e.into())
            }
        }
    }
}
