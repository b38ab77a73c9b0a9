//! The system under test: a private PostgreSQL cluster and three payments-api replicas, each a
//! separate process on its own port, that the fault injector can kill, pause and restart.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::rpc_fault::RpcFaultProxy;

/// A throwaway PostgreSQL cluster, so restarting it in immediate mode disturbs nothing else.
pub struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    pub port: u16,
}

impl Postgres {
    pub fn start_new(port: u16) -> anyhow::Result<Self> {
        let bin = std::env::var_os("PG_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(find_pg_bin);
        let data = PathBuf::from(format!("/var/tmp/payments-chaos-pg-{port}"));
        if data.exists() {
            std::fs::remove_dir_all(&data)?;
        }
        std::fs::create_dir_all(&data)?;
        if is_root() {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&data))?;
        }
        let pg = Self { bin, data, port };
        pg.as_owner(&format!(
            "{} -D {} -U postgres --auth=trust -E UTF8",
            pg.tool("initdb"),
            pg.data.display()
        ))?;
        pg.start()?;
        Ok(pg)
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    pub fn start(&self) -> anyhow::Result<()> {
        self.as_owner(&format!(
            "{} -D {} -l {}/server.log -w -t 60 -o '-p {} -k /tmp -c max_connections=300' start",
            self.tool("pg_ctl"),
            self.data.display(),
            self.data.display(),
            self.port
        ))
    }

    /// Stops like a crash: no checkpoint, crash recovery at the next start.
    pub fn stop_immediate(&self) -> anyhow::Result<()> {
        self.as_owner(&format!(
            "{} -D {} -m immediate -w stop",
            self.tool("pg_ctl"),
            self.data.display()
        ))
    }

    fn tool(&self, name: &str) -> String {
        self.bin.join(name).display().to_string()
    }

    /// initdb and pg_ctl refuse to run as root: run them as the postgres user when we are root.
    fn as_owner(&self, command: &str) -> anyhow::Result<()> {
        let mut cmd = if is_root() {
            let mut c = Command::new("su");
            c.args(["postgres", "-s", "/bin/sh", "-c", command]);
            c
        } else {
            let mut c = Command::new("sh");
            c.args(["-c", command]);
            c
        };
        run(cmd.current_dir("/tmp"))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self.as_owner(&format!(
            "{} -D {} -m fast -w stop",
            self.tool("pg_ctl"),
            self.data.display()
        ));
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

pub fn find_pg_bin() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dir| {
            dir.filter_map(|e| e.ok().map(|e| e.path().join("bin")))
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions
        .pop()
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"))
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let output = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !output.status.success() {
        bail!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// One payments-api process.
pub struct Replica {
    pub index: usize,
    pub port: u16,
    bin: PathBuf,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
    /// Process ids this replica has had: a restart by the fault injector adds one.
    pub pids: Vec<u32>,
    /// The proxy its chain is reached through, which kills it between a broadcast and its record
    /// with this probability, while armed.
    crash_point: Option<(RpcFaultProxy, f64)>,
}

impl Replica {
    pub fn new(
        index: usize,
        port: u16,
        bin: &Path,
        env: Vec<(String, String)>,
        log_dir: &Path,
    ) -> Self {
        let log = log_dir.join(format!("replica-{index}.log"));
        Self {
            index,
            port,
            bin: bin.to_owned(),
            env,
            log,
            child: None,
            pids: Vec::new(),
            crash_point: None,
        }
    }

    /// Its first chain (31337) through `proxy`, killing each process it starts between a
    /// broadcast and its record with `probability`; any other chain directly.
    pub fn with_crash_point(mut self, proxy: RpcFaultProxy, probability: f64) -> Self {
        for (name, value) in &mut self.env {
            if name == "CHAINS" {
                let others: Vec<&str> = value
                    .split(',')
                    .filter(|chain| !chain.starts_with("evm:31337="))
                    .collect();
                *value = std::iter::once(format!("evm:31337={}", proxy.url))
                    .chain(others.into_iter().map(str::to_owned))
                    .collect::<Vec<_>>()
                    .join(",");
            }
        }
        self.crash_point = Some((proxy, probability));
        self
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub async fn start(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new(&self.bin)
            .arg("serve")
            .env("BIND_ADDR", format!("127.0.0.1:{}", self.port))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .context("start payments-api")?;
        self.pids.push(child.id());
        if let Some((proxy, probability)) = &self.crash_point {
            proxy.aim_at(child.id(), *probability);
        }
        self.child = Some(child);
        let started = Instant::now();
        while reqwest::get(format!("{}/healthz", self.base()))
            .await
            .is_err()
        {
            if started.elapsed() > Duration::from_secs(30) {
                bail!(
                    "replica {} did not start; see {}",
                    self.index,
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args([&format!("-{signal}"), &pid.to_string()])
                .status();
        }
    }

    /// Whether the process this replica last started exited without being killed here.
    pub fn exited_by_itself(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Later starts run without the relayer's crash point, so a run that waits for settlement
    /// after its load sees each replica die by itself at most once more.
    pub fn disarm_crash_point(&mut self) {
        if let Some((proxy, probability)) = &mut self.crash_point {
            proxy.disarm();
            *probability = 0.0;
        }
    }

    /// Whether the process this replica last started is still running.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.signal("CONT");
        self.kill();
    }
}

/// The chain: anvil with one-second blocks whose state is dumped to a file when it stops and
/// loaded when it starts, so a restart keeps the chain (as compose's volume does).
pub struct Chain {
    pub port: u16,
    chain_id: u64,
    state: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Chain {
    /// The chain 31337.
    pub fn new(port: u16, dir: &Path) -> Self {
        Self::with_id(port, dir, 31337, "anvil")
    }

    /// The chain `chain_id`, its state and log named after `name` in `dir`.
    pub fn with_id(port: u16, dir: &Path, chain_id: u64, name: &str) -> Self {
        let state = dir.join(format!("{name}-state.json"));
        let _ = std::fs::remove_file(&state);
        Self {
            port,
            chain_id,
            state,
            log: dir.join(format!("{name}.log")),
            child: None,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub async fn start(&mut self) -> anyhow::Result<()> {
        let anvil = std::env::var_os("ANVIL_BIN").map_or_else(
            || PathBuf::from("contracts/node_modules/.bin/anvil"),
            PathBuf::from,
        );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new(&anvil)
            .args([
                "--port",
                &self.port.to_string(),
                "--chain-id",
                &self.chain_id.to_string(),
                "--block-time",
                "1",
            ])
            .arg("--state")
            .arg(&self.state)
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("start {} (make chain-tools)", anvil.display()))?;
        self.child = Some(child);
        let started = Instant::now();
        let probe = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber", "params": []});
        let client = reqwest::Client::new();
        while client.post(self.url()).json(&probe).send().await.is_err() {
            if started.elapsed() > Duration::from_secs(30) {
                bail!("anvil did not start; see {}", self.log.display());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// SIGTERM: anvil writes its state before it exits.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }

    pub async fn rpc(
        &self,
        method: &str,
        params: serde_json::Value,
    ) -> anyhow::Result<serde_json::Value> {
        let answer: serde_json::Value = reqwest::Client::new()
            .post(self.url())
            .json(
                &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
            )
            .send()
            .await?
            .json()
            .await?;
        if let Some(error) = answer.get("error") {
            bail!("{method}: {error}");
        }
        Ok(answer["result"].clone())
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
