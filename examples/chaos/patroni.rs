//! The database as a deployment that outgrew one machine runs it (`docs/ha.md`): one etcd, three
//! PostgreSQL servers under Patroni with a synchronous standby (`synchronous_mode` and
//! `synchronous_mode_strict`), and HAProxy sending connections to whichever server Patroni's REST
//! API says is the primary. Every process is the machine's own (Debian's `patroni`,
//! `etcd-server`, `haproxy`), run as `postgres` when the harness runs as root.

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::cluster::{is_root, run};

/// Patroni's timing: a leader that stops renewing its key loses it after `TTL` seconds.
pub const TTL: u64 = 10;
const LOOP_WAIT: u64 = 1;
const RETRY_TIMEOUT: u64 = 4;

pub struct PatroniCluster {
    dir: PathBuf,
    /// Where the cluster's logs are kept when it is dropped.
    logs: PathBuf,
    etcd_port: u16,
    etcd: Option<Child>,
    pub nodes: Vec<Node>,
    pub proxy_port: u16,
    haproxy: Option<Child>,
    owner: Option<(u32, u32)>,
}

pub struct Node {
    pub name: String,
    pub pg_port: u16,
    pub rest_port: u16,
    config: PathBuf,
    data: PathBuf,
    patroni: Option<Child>,
}

impl PatroniCluster {
    /// Starts etcd, three Patroni nodes (the first to win bootstraps, the others clone it), and
    /// HAProxy; returns once a leader takes writes and a synchronous standby is streaming.
    pub async fn start_new(base_port: u16, logs: &Path) -> anyhow::Result<Self> {
        for tool in ["patroni", "etcd", "haproxy"] {
            if which(tool).is_none() {
                bail!(
                    "{tool} not found: `make ha-chaos` installs patroni, etcd-server and haproxy"
                );
            }
        }
        let dir = PathBuf::from(format!("/var/tmp/payments-ha-{base_port}"));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        let owner = postgres_owner()?;
        if owner.is_some() {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir))?;
        }
        let nodes = (0..3)
            .map(|i| {
                let name = format!("pg{i}");
                Node {
                    config: dir.join(format!("{name}.yml")),
                    data: dir.join(&name),
                    pg_port: base_port + 22 + i,
                    rest_port: base_port + 25 + i,
                    name,
                    patroni: None,
                }
            })
            .collect();
        let mut cluster = Self {
            dir,
            logs: logs.to_owned(),
            etcd_port: base_port + 20,
            etcd: None,
            nodes,
            proxy_port: base_port + 28,
            haproxy: None,
            owner,
        };
        cluster.start_etcd()?;
        let bin = pg_bin();
        for i in 0..cluster.nodes.len() {
            let yaml = cluster.patroni_config(&cluster.nodes[i], &bin);
            std::fs::write(&cluster.nodes[i].config, yaml)?;
            cluster.start_patroni(i)?;
        }
        std::fs::write(cluster.dir.join("haproxy.cfg"), cluster.haproxy_config())?;
        cluster.haproxy = Some(
            cluster.spawn(
                Command::new("haproxy")
                    .arg("-f")
                    .arg(cluster.dir.join("haproxy.cfg")),
                "haproxy.log",
            )?,
        );
        let started = Instant::now();
        loop {
            let members = cluster.members().await.unwrap_or_default();
            let leader = members.iter().any(|m| m.role == "leader");
            let sync = members.iter().any(|m| {
                m.role == "sync_standby" && matches!(m.state.as_str(), "running" | "streaming")
            });
            if leader && sync {
                break;
            }
            if started.elapsed() > Duration::from_secs(90) {
                bail!(
                    "no leader with a streaming synchronous standby after 90 s; see {}",
                    cluster.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(cluster)
    }

    /// Through HAProxy, which sends every connection to the leader.
    pub fn proxy_url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}?sslmode=disable",
            self.proxy_port
        )
    }

    /// Every node, for the API's own search of the primary (`target_session_attrs=read-write`).
    pub fn multi_host_url(&self, database: &str) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.pg_port))
            .collect();
        format!(
            "postgres://postgres@{}/{database}?sslmode=disable&target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    /// The cluster as Patroni reports it (from any node that answers).
    pub async fn members(&self) -> anyhow::Result<Vec<Member>> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let mut last = None;
        for node in &self.nodes {
            match client
                .get(format!("http://127.0.0.1:{}/cluster", node.rest_port))
                .send()
                .await
            {
                Ok(answer) => {
                    let cluster: ClusterView = answer.json().await?;
                    return Ok(cluster.members);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or_else(|| anyhow::anyhow!("no node"), Into::into))
    }

    /// The index of the node holding the leader key, if one does.
    pub async fn leader(&self) -> Option<usize> {
        let members = self.members().await.ok()?;
        let leader = members.iter().find(|m| m.role == "leader")?;
        self.nodes.iter().position(|n| n.name == leader.name)
    }

    /// SIGKILL of the leader's postmaster: Patroni sees it gone and fails over or restarts it.
    pub async fn kill_leader_postgres(&self) -> anyhow::Result<Option<usize>> {
        let Some(leader) = self.leader().await else {
            return Ok(None);
        };
        let pid_file = self.nodes[leader].data.join("postmaster.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .with_context(|| format!("read {}", pid_file.display()))?;
        let pid = pid.lines().next().unwrap_or_default().trim().to_owned();
        run(Command::new("kill").args(["-KILL", &pid]))?;
        Ok(Some(leader))
    }

    /// SIGKILL of the leader's Patroni (its PostgreSQL keeps running, leaderless), restarted after
    /// `down`.
    pub async fn kill_leader_patroni(&mut self, down: Duration) -> anyhow::Result<Option<usize>> {
        let Some(leader) = self.leader().await else {
            return Ok(None);
        };
        if let Some(mut child) = self.nodes[leader].patroni.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        tokio::time::sleep(down).await;
        self.start_patroni(leader)?;
        Ok(Some(leader))
    }

    /// A planned switchover to the synchronous standby, through Patroni's REST API.
    pub async fn switchover(&self) -> anyhow::Result<Option<usize>> {
        let members = self.members().await?;
        let (Some(leader), Some(candidate)) = (
            members.iter().find(|m| m.role == "leader"),
            members.iter().find(|m| m.role == "sync_standby"),
        ) else {
            return Ok(None);
        };
        let leader_index = self.nodes.iter().position(|n| n.name == leader.name);
        let answer = reqwest::Client::new()
            .post(format!(
                "http://127.0.0.1:{}/switchover",
                self.nodes[leader_index.unwrap_or(0)].rest_port
            ))
            .json(&serde_json::json!({"leader": leader.name, "candidate": candidate.name}))
            .timeout(Duration::from_secs(30))
            .send()
            .await?;
        if !answer.status().is_success() {
            bail!("switchover refused: {}", answer.text().await?);
        }
        Ok(leader_index)
    }

    /// etcd stopped for `down`: no node can renew or take the leader key meanwhile.
    pub async fn stop_etcd(&mut self, down: Duration) -> anyhow::Result<()> {
        if let Some(mut child) = self.etcd.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        tokio::time::sleep(down).await;
        self.start_etcd()
    }

    fn start_etcd(&mut self) -> anyhow::Result<()> {
        let client = format!("http://127.0.0.1:{}", self.etcd_port);
        let peer = format!("http://127.0.0.1:{}", self.etcd_port + 1);
        let child = self.spawn(
            Command::new("etcd")
                .args(["--name", "etcd0", "--data-dir"])
                .arg(self.dir.join("etcd"))
                .args(["--listen-client-urls", &client])
                .args(["--advertise-client-urls", &client])
                .args(["--listen-peer-urls", &peer])
                .args(["--initial-advertise-peer-urls", &peer])
                .args(["--initial-cluster", &format!("etcd0={peer}")]),
            "etcd.log",
        )?;
        self.etcd = Some(child);
        Ok(())
    }

    fn start_patroni(&mut self, i: usize) -> anyhow::Result<()> {
        let config = self.nodes[i].config.clone();
        let log = format!("{}.log", self.nodes[i].name);
        let child = self.spawn(Command::new("patroni").arg(config), &log)?;
        self.nodes[i].patroni = Some(child);
        Ok(())
    }

    /// Spawns a cluster process as the owner of the data, its output appended to `log`.
    fn spawn(&self, command: &mut Command, log: &str) -> anyhow::Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(log))?;
        if let Some((uid, gid)) = self.owner {
            command.uid(uid).gid(gid).env("HOME", &self.dir);
        }
        command
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        command
            .spawn()
            .with_context(|| format!("start {command:?}"))
    }

    fn patroni_config(&self, node: &Node, bin: &Path) -> String {
        format!(
            r#"scope: payments
name: {name}
restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest}
etcd3:
  hosts: 127.0.0.1:{etcd}
bootstrap:
  dcs:
    ttl: {TTL}
    loop_wait: {LOOP_WAIT}
    retry_timeout: {RETRY_TIMEOUT}
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    synchronous_mode_strict: true
    postgresql:
      use_pg_rewind: true
      parameters:
        max_connections: 300
        wal_log_hints: 'on'
        wal_keep_size: 256MB
  initdb:
    - encoding: UTF8
    - auth: trust
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {dir}/{name}.pgpass
  authentication:
    superuser:
      username: postgres
      password: postgres
    replication:
      username: postgres
      password: postgres
    rewind:
      username: postgres
      password: postgres
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
  parameters:
    unix_socket_directories: /tmp
"#,
            name = node.name,
            rest = node.rest_port,
            etcd = self.etcd_port,
            pg = node.pg_port,
            data = node.data.display(),
            bin = bin.display(),
            dir = self.dir.display(),
        )
    }

    /// HAProxy checks each node's Patroni (`GET /primary` answers 200 only on the leader) every
    /// second, and cuts the connections of a server marked down, so clients reconnect to the new
    /// leader instead of hanging on the old one.
    fn haproxy_config(&self) -> String {
        let mut servers = String::new();
        for node in &self.nodes {
            servers.push_str(&format!(
                "    server {} 127.0.0.1:{} maxconn 300 check port {} inter 1s fall 2 rise 1 on-marked-down shutdown-sessions\n",
                node.name, node.pg_port, node.rest_port
            ));
        }
        format!(
            r#"global
    maxconn 1000
defaults
    mode tcp
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    timeout check 2s
listen primary
    bind 127.0.0.1:{port}
    option httpchk GET /primary
    http-check expect status 200
{servers}"#,
            port = self.proxy_port
        )
    }
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        let mut children: Vec<Child> = self
            .nodes
            .iter_mut()
            .filter_map(|n| n.patroni.take())
            .chain(self.haproxy.take())
            .chain(self.etcd.take())
            .collect();
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Patroni's PostgreSQL servers outlive a killed Patroni.
        for node in &self.nodes {
            if let Ok(pid) = std::fs::read_to_string(node.data.join("postmaster.pid"))
                && let Some(pid) = pid.lines().next()
            {
                let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
            }
        }
        // The cluster's own logs (etcd, Patroni, PostgreSQL, HAProxy) stay with the run's.
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "log") {
                    let _ = std::fs::copy(&path, self.logs.join(entry.file_name()));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[derive(serde::Deserialize)]
struct ClusterView {
    members: Vec<Member>,
}

#[derive(serde::Deserialize, Debug, Clone, Default)]
pub struct Member {
    pub name: String,
    pub role: String,
    #[serde(default)]
    pub state: String,
}

/// The postgres user's ids when running as root (Patroni's initdb refuses root), else None.
fn postgres_owner() -> anyhow::Result<Option<(u32, u32)>> {
    if !is_root() {
        return Ok(None);
    }
    let id = |flag: &str| -> anyhow::Result<u32> {
        let out = Command::new("id").args([flag, "postgres"]).output()?;
        Ok(String::from_utf8(out.stdout)?.trim().parse()?)
    };
    Ok(Some((id("-u")?, id("-g")?)))
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
            .map(|dir| dir.join(tool))
            .find(|p| p.exists())
    })
}

fn pg_bin() -> PathBuf {
    crate::cluster::find_pg_bin()
}
