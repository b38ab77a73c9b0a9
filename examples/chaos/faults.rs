//! Faults on a schedule while the load runs, each recorded with its time window.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use sqlx::{Connection, PgConnection};
use tokio::sync::Mutex;

use anyhow::Context;

use crate::{
    client::Shared,
    cluster::{Chain, Postgres, Replica},
    patroni::{self, PatroniCluster},
    rpc_fault::RpcFaultProxy,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    KillReplica,
    RestartPostgres,
    TerminateBackends,
    StallWrites,
    PauseReplica,
    RestartChain,
    ReorgChain,
    KillRelayer,
    /// Not injected on a schedule: a replica's relayer died by itself between a broadcast and
    /// its record (killed by its chain's proxy, `RpcFaultProxy`), and was restarted.
    RelayerCrashedAfterBroadcast,
    /// The Patroni cluster (`--ha`): SIGKILL of the leader's postmaster.
    KillLeaderPostgres,
    /// SIGKILL of the leader's Patroni, restarted after a few seconds.
    KillLeaderPatroni,
    /// A planned switchover to the synchronous standby.
    Switchover,
    /// etcd stopped for longer than the leader key's TTL.
    StopEtcd,
}

impl FaultKind {
    pub const ROTATION: [FaultKind; 8] = [
        FaultKind::KillReplica,
        FaultKind::RestartChain,
        FaultKind::RestartPostgres,
        FaultKind::ReorgChain,
        FaultKind::TerminateBackends,
        FaultKind::KillRelayer,
        FaultKind::StallWrites,
        FaultKind::PauseReplica,
    ];

    /// The faults of a run on a Patroni cluster: each fails over, or tries to.
    pub const HA_ROTATION: [FaultKind; 4] = [
        FaultKind::KillLeaderPostgres,
        FaultKind::Switchover,
        FaultKind::KillLeaderPatroni,
        FaultKind::StopEtcd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::KillReplica => "SIGKILL a replica, restart it",
            Self::RestartPostgres => "restart PostgreSQL (immediate)",
            Self::TerminateBackends => "pg_terminate_backend (all)",
            Self::StallWrites => "stall writes past the lease",
            Self::PauseReplica => "SIGSTOP a replica past its lease",
            Self::RestartChain => "restart anvil (state kept)",
            Self::ReorgChain => "reorg the chain 2 blocks deep",
            Self::KillRelayer => "SIGKILL the relayer, restart it",
            Self::RelayerCrashedAfterBroadcast => "relayer died between broadcast and record",
            Self::KillLeaderPostgres => "SIGKILL the leader's PostgreSQL",
            Self::KillLeaderPatroni => "SIGKILL the leader's Patroni, restart it",
            Self::Switchover => "switchover to the synchronous standby",
            Self::StopEtcd => "stop etcd past the leader key's TTL",
        }
    }

    /// Faults during which the database is unreachable or stalled, so 503 is a fair answer.
    pub fn impairs_database(self) -> bool {
        matches!(
            self,
            Self::RestartPostgres
                | Self::TerminateBackends
                | Self::StallWrites
                | Self::KillLeaderPostgres
                | Self::KillLeaderPatroni
                | Self::Switchover
                | Self::StopEtcd
        )
    }
}

#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: FaultKind,
    pub replica: Option<usize>,
    pub started: Duration,
    pub ended: Duration,
}

pub struct Injector {
    pub shared: Arc<Shared>,
    /// A single server (`RestartPostgres`), or the Patroni cluster of an `--ha` run.
    pub postgres: Option<Arc<Postgres>>,
    pub patroni: Option<Arc<Mutex<PatroniCluster>>>,
    pub replicas: Arc<Mutex<Vec<Replica>>>,
    pub database_url: String,
    pub lease: Duration,
    pub every: Duration,
    pub chain: Arc<Mutex<Chain>>,
}

impl Injector {
    /// Injects faults in rotation until the load stops.
    pub async fn run(self) -> Vec<Fault> {
        let mut faults = Vec::new();
        for round in 0.. {
            tokio::time::sleep(self.every).await;
            if self.shared.stop.load(Ordering::Relaxed) {
                break;
            }
            let rotation: &[FaultKind] = if self.patroni.is_some() {
                &FaultKind::HA_ROTATION
            } else {
                &FaultKind::ROTATION
            };
            let kind = rotation[round % rotation.len()];
            // The replica a fault hits, chosen before it strikes.
            let replicas = self.shared.bases.len();
            let replica = match kind {
                FaultKind::KillReplica | FaultKind::PauseReplica => Some(round % replicas),
                FaultKind::KillRelayer => self.relayer_replica().await,
                _ => None,
            };
            let started = self.shared.started.elapsed();
            eprintln!("chaos: {:>6.1}s {}", started.as_secs_f64(), kind.name());
            if let Err(e) = self.inject(kind, replica).await {
                eprintln!("chaos: fault {kind:?} failed: {e:#}");
            }
            // A failover outlasts its trigger: the fault lasts until writes go through again.
            if self.patroni.is_some() {
                self.wait_writable().await;
            }
            let ended = self.shared.started.elapsed();
            faults.push(Fault {
                kind,
                replica,
                started,
                ended,
            });
        }
        faults
    }

    async fn inject(&self, kind: FaultKind, replica: Option<usize>) -> anyhow::Result<()> {
        let past_the_lease = self.lease + Duration::from_secs(1);
        match kind {
            FaultKind::KillReplica | FaultKind::KillRelayer => {
                // No relayer holds the lease: nothing to kill this round.
                let Some(replica) = replica else {
                    return Ok(());
                };
                self.replicas.lock().await[replica].kill();
                tokio::time::sleep(Duration::from_secs(1)).await;
                self.replicas.lock().await[replica].start().await?;
            }
            FaultKind::KillLeaderPostgres => {
                self.patroni()?.lock().await.kill_leader_postgres().await?;
            }
            FaultKind::KillLeaderPatroni => {
                self.patroni()?
                    .lock()
                    .await
                    .kill_leader_patroni(Duration::from_secs(3))
                    .await?;
            }
            FaultKind::Switchover => {
                self.patroni()?.lock().await.switchover().await?;
            }
            FaultKind::StopEtcd => {
                self.patroni()?
                    .lock()
                    .await
                    .stop_etcd(Duration::from_secs(patroni::TTL + 5))
                    .await?;
            }
            FaultKind::RestartPostgres => {
                let postgres = self.postgres.clone().context("no single server")?;
                tokio::task::spawn_blocking(move || {
                    postgres.stop_immediate()?;
                    std::thread::sleep(Duration::from_secs(2));
                    postgres.start()
                })
                .await??;
            }
            FaultKind::TerminateBackends => {
                let mut conn = PgConnection::connect(&self.database_url).await?;
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                )
                .execute(&mut conn)
                .await?;
            }
            FaultKind::StallWrites => {
                let mut conn = PgConnection::connect(&self.database_url).await?;
                let mut tx = conn.begin().await?;
                sqlx::query("LOCK TABLE payment_intents IN SHARE MODE")
                    .execute(&mut *tx)
                    .await?;
                tokio::time::sleep(past_the_lease).await;
                tx.rollback().await?;
            }
            FaultKind::PauseReplica => {
                let Some(replica) = replica else {
                    return Ok(());
                };
                self.replicas.lock().await[replica].signal("STOP");
                tokio::time::sleep(past_the_lease).await;
                self.replicas.lock().await[replica].signal("CONT");
            }
            FaultKind::RestartChain => {
                let mut chain = self.chain.lock().await;
                chain.stop();
                tokio::time::sleep(Duration::from_secs(2)).await;
                chain.start().await?;
            }
            // Happens by itself, never scheduled.
            FaultKind::RelayerCrashedAfterBroadcast => {}
            FaultKind::ReorgChain => {
                // Shallower than the confirmations: only unconfirmed observations are undone.
                self.chain
                    .lock()
                    .await
                    .rpc("anvil_reorg", serde_json::json!([2, []]))
                    .await?;
            }
        }
        Ok(())
    }

    fn patroni(&self) -> anyhow::Result<&Arc<Mutex<PatroniCluster>>> {
        self.patroni
            .as_ref()
            .context("no Patroni cluster in this run")
    }

    /// Waits (at most a minute) until a write through the harness's URL commits.
    async fn wait_writable(&self) {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            let wrote = async {
                let mut conn = PgConnection::connect(&self.database_url).await?;
                // A transaction id of its own: its commit waits for the synchronous standby.
                sqlx::query("SELECT txid_current()")
                    .execute(&mut conn)
                    .await?;
                anyhow::Ok(())
            };
            if tokio::time::timeout(Duration::from_secs(2), wrote)
                .await
                .is_ok_and(|r| r.is_ok())
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The replica whose process holds the relayer's lease (its holder starts with its pid).
    async fn relayer_replica(&self) -> Option<usize> {
        let mut conn = PgConnection::connect(&self.database_url).await.ok()?;
        let holder: String =
            sqlx::query_scalar("SELECT holder FROM relayer_leases WHERE expires_at > now()")
                .fetch_optional(&mut conn)
                .await
                .ok()??;
        let pid: u32 = holder.split(':').next()?.parse().ok()?;
        self.replicas
            .lock()
            .await
            .iter()
            .position(|r| r.pid() == Some(pid))
    }
}

/// Moves the expiry of a few created intents into the past now and then, so the sweepers of all
/// replicas have work that races the merchants' cancels.
pub async fn age_intents(shared: Arc<Shared>, database_url: String) -> u64 {
    let mut aged = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let Ok(mut conn) = PgConnection::connect(&database_url).await else {
            continue;
        };
        if let Ok(done) = sqlx::query(
            "UPDATE payment_intents SET expires_at = now() WHERE (merchant_id, id) IN \
             (SELECT merchant_id, id FROM payment_intents WHERE state = 'created' ORDER BY random() LIMIT 4)",
        )
        .execute(&mut conn)
        .await
        {
            aged += done.rows_affected();
        }
    }
    aged
}

/// One of the second chain's two endpoints misbehaves as hosted providers do, one way after
/// another for 4 s each, well-behaved for 4 s between: 20 blocks behind, a 429 with
/// `Retry-After`, `eth_getLogs` refused over 16 blocks, down, stalled past every timeout, and
/// broadcasts whose answers are lost with the connection. Returns the turns it misbehaved.
pub async fn misbehave(shared: Arc<Shared>, endpoint: RpcFaultProxy) -> u64 {
    let mut turns = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        match turns % 6 {
            0 => endpoint.lag_by(20),
            1 => endpoint.throttle_next(3),
            2 => endpoint.cap_log_ranges(16),
            3 => endpoint.set_down(true),
            4 => endpoint.set_stalled(true),
            _ => endpoint.reset_answers_to(Some("eth_sendRawTransaction")),
        }
        tokio::time::sleep(Duration::from_secs(4)).await;
        endpoint.lag_by(0);
        endpoint.cap_log_ranges(0);
        endpoint.set_down(false);
        endpoint.set_stalled(false);
        endpoint.reset_answers_to(None);
        turns += 1;
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
    turns
}

/// Samples every replica's /readyz, to show each one rides out the database restart by itself.
/// The probe answers within about 2 s even with the database down, so a sample waits up to 3 s.
pub async fn watch_readiness(shared: Arc<Shared>) -> Vec<(Duration, usize, u16)> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .expect("client");
    // One prober per replica: a replica that does not answer must not keep the others unprobed
    // (probing in rounds once missed a whole database restart on a replica that was fine).
    let probers = shared.bases.iter().enumerate().map(|(i, base)| {
        let (http, shared, base) = (http.clone(), shared.clone(), base.clone());
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while !shared.stop.load(Ordering::Relaxed) {
                let status = match http.get(format!("{base}/readyz")).send().await {
                    Ok(r) => r.status().as_u16(),
                    Err(_) => 0,
                };
                samples.push((shared.started.elapsed(), i, status));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            samples
        })
    });
    let mut samples: Vec<(Duration, usize, u16)> = futures::future::join_all(probers)
        .await
        .into_iter()
        .flat_map(|samples| samples.unwrap_or_default())
        .collect();
    samples.sort_by_key(|(t, ..)| *t);
    samples
}

/// Restarts every replica that died by itself (its relayer crashed between a broadcast and its
/// record, as armed), recording each as a fault of that replica.
pub async fn restart_crashed(
    shared: Arc<Shared>,
    replicas: Arc<Mutex<Vec<Replica>>>,
    judged: Arc<AtomicBool>,
) -> Vec<Fault> {
    let mut faults = Vec::new();
    // Relayers keep sending (and dying) while the run waits for settlement after the load, so
    // the watcher keeps restarting them until the checker starts reading.
    while !judged.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut replicas = replicas.lock().await;
        for replica in replicas.iter_mut() {
            if !replica.exited_by_itself() {
                continue;
            }
            let started = shared.started.elapsed();
            eprintln!(
                "chaos: {:>6.1}s replica {} died between broadcast and record; restarting",
                started.as_secs_f64(),
                replica.index
            );
            if shared.stop.load(Ordering::Relaxed) {
                replica.disarm_crash_point();
            }
            if let Err(e) = replica.start().await {
                eprintln!("chaos: restarting replica {} failed: {e:#}", replica.index);
            }
            faults.push(Fault {
                kind: FaultKind::RelayerCrashedAfterBroadcast,
                replica: Some(replica.index),
                started,
                ended: shared.started.elapsed(),
            });
        }
    }
    faults
}
