//! Wakes a chain's relayers when a submission is queued for it, and whoever awaits a submission
//! when it is done, instead of at their next poll: the queueing transaction notifies
//! `outbox::QUEUED_CHANNEL` with the chain id, a submission's end notifies `outbox::DONE_CHANNEL`
//! with its id, and this worker, one connection per replica listening on the server that takes
//! writes, passes them on. A missed notification (the connection was down) costs only a poll:
//! relayers and awaiting callers still poll.

use std::{collections::HashMap, sync::Arc, time::Duration};

use sqlx::postgres::PgListener;
use tokio::sync::Notify;

use super::outbox::{self, Outcomes};
use crate::{
    db::servers::Servers,
    workers::{Failed, Next, Schedule, Worker},
};

/// How long one unit listens before it returns (and says it is alive).
const LISTEN_FOR: Duration = Duration::from_secs(10);

pub struct WakeupWorker {
    database_url: String,
    /// The relayers' wake-ups per chain id, one per key.
    relayers: Arc<HashMap<u64, Vec<Arc<Notify>>>>,
    outcomes: Outcomes,
    listener: Option<PgListener>,
}

impl WakeupWorker {
    pub fn new(
        database_url: String,
        relayers: Arc<HashMap<u64, Vec<Arc<Notify>>>>,
        outcomes: Outcomes,
    ) -> Self {
        Self {
            database_url,
            relayers,
            outcomes,
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
        listener
            .listen_all([outbox::QUEUED_CHANNEL, outbox::DONE_CHANNEL])
            .await?;
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
                self.relayers
                    .values()
                    .flatten()
                    .for_each(|wake| wake.notify_one());
                self.listener.insert(listener)
            }
        };
        match tokio::time::timeout(LISTEN_FOR, listener.try_recv()).await {
            Err(_) => Ok(Next::Again),
            Ok(Ok(Some(notification))) if notification.channel() == outbox::DONE_CHANNEL => {
                if let Ok(id) = notification.payload().parse() {
                    self.outcomes.done(id);
                }
                Ok(Next::Again)
            }
            Ok(Ok(Some(notification))) => {
                let chain = notification.payload().parse::<u64>().ok();
                if let Some(wakes) = chain.and_then(|id| self.relayers.get(&id)) {
                    wakes.iter().for_each(|wake| wake.notify_one());
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
