//! Tells open checkout pages that their intent changed. The transaction of every change of an
//! intent notifies `events::CHANGED_CHANNEL` with its id; this worker, one `LISTEN` per replica on the
//! server that takes writes, passes each id to the page streams of this replica, which read their
//! intent again. A notification missed while the connection was down costs only a poll: a stream
//! also reads its intent every few seconds.

use std::{sync::Arc, time::Duration};

use sqlx::postgres::PgListener;
use tokio::sync::{broadcast, watch};

use crate::{
    db::servers::Servers,
    events,
    workers::{Failed, Next, Schedule, Worker},
};

/// How long one unit listens before it returns (and says it is alive).
const LISTEN_FOR: Duration = Duration::from_secs(10);

/// The ids of intents that changed, for this replica's streams to filter, and whether the server
/// is stopping (streams then end at once, so they do not hold the graceful shutdown).
#[derive(Clone)]
pub struct Changes {
    changed: broadcast::Sender<Arc<str>>,
    stopping: Arc<watch::Sender<bool>>,
}

impl Default for Changes {
    fn default() -> Self {
        Self {
            // A stream that lags behind just reads its intent again.
            changed: broadcast::channel(1024).0,
            stopping: Arc::new(watch::channel(false).0),
        }
    }
}

impl Changes {
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.changed.subscribe()
    }

    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// The server stops accepting: every open stream ends.
    pub fn stop(&self) {
        self.stopping.send_replace(true);
    }
}

pub struct ChangesWorker {
    database_url: String,
    changes: Changes,
    listener: Option<PgListener>,
}

impl ChangesWorker {
    pub fn new(database_url: String, changes: Changes) -> Self {
        Self {
            database_url,
            changes,
            listener: None,
        }
    }

    pub fn schedule() -> Schedule {
        Schedule::every(LISTEN_FOR)
    }
}

impl Worker for ChangesWorker {
    async fn run_once(&mut self) -> Result<Next, Failed> {
        let listener = match &mut self.listener {
            Some(listener) => listener,
            None => {
                // A standby cannot LISTEN: the server that takes writes now.
                let servers: Servers = self.database_url.parse()?;
                let mut listener = PgListener::connect(&servers.writable_url().await?).await?;
                listener.listen(events::CHANGED_CHANNEL).await?;
                self.listener.insert(listener)
            }
        };
        match tokio::time::timeout(LISTEN_FOR, listener.try_recv()).await {
            Err(_) => Ok(Next::Again),
            Ok(Ok(Some(notification))) => {
                // No stream open is no error.
                let _ = self.changes.changed.send(Arc::from(notification.payload()));
                Ok(Next::Again)
            }
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
