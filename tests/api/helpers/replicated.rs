//! A PostgreSQL primary and a streaming hot standby of the test's own, made with the machine's
//! PostgreSQL binaries (`initdb`, `pg_basebackup`, `pg_ctl`), so a test can fail over for real:
//! promote the standby, crash the primary.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// One server of the pair.
pub struct Node {
    pub port: u16,
    data: PathBuf,
}

pub struct ReplicatedPostgres {
    pub primary: Node,
    pub standby: Node,
    bin: PathBuf,
}

impl ReplicatedPostgres {
    /// Starts the primary, clones it into a standby that streams from it, starts that.
    pub async fn start() -> Self {
        tokio::task::spawn_blocking(|| {
            let bin = pg_bin();
            let primary = Node::new(free_port());
            let standby = Node::new(free_port());
            let pair = Self {
                primary,
                standby,
                bin,
            };
            pair.as_owner(&format!(
                "{} -D {} -U postgres --auth=trust -E UTF8",
                pair.tool("initdb"),
                pair.primary.data.display()
            ));
            pair.pg_ctl_start(&pair.primary);
            pair.as_owner(&format!(
                "{} -h 127.0.0.1 -p {} -U postgres -D {} -R -X stream",
                pair.tool("pg_basebackup"),
                pair.primary.port,
                pair.standby.data.display()
            ));
            pair.pg_ctl_start(&pair.standby);
            pair
        })
        .await
        .unwrap()
    }

    pub fn url(node: &Node, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", node.port)
    }

    /// The standby becomes a primary (waits until it takes writes).
    pub fn promote_standby(&self) {
        self.as_owner(&format!(
            "{} -D {} -w promote",
            self.tool("pg_ctl"),
            self.standby.data.display()
        ));
    }

    /// Stops the primary like a crash: no shutdown checkpoint, connections cut.
    pub fn crash_primary(&self) {
        self.as_owner(&format!(
            "{} -D {} -m immediate -w stop",
            self.tool("pg_ctl"),
            self.primary.data.display()
        ));
    }

    fn pg_ctl_start(&self, node: &Node) {
        self.as_owner(&format!(
            "{} -D {} -l {}/server.log -w -t 60 -o '-p {} -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off' start",
            self.tool("pg_ctl"),
            node.data.display(),
            node.data.display(),
            node.port
        ));
    }

    fn tool(&self, name: &str) -> String {
        self.bin.join(name).display().to_string()
    }

    /// Runs a PostgreSQL tool; panics with its output if it fails.
    fn as_owner(&self, command: &str) {
        let output = as_owner(command).output().expect("run a PostgreSQL tool");
        assert!(
            output.status.success(),
            "{command}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// initdb, pg_basebackup and pg_ctl refuse to run as root: as root, they run as `postgres`.
fn as_owner(command: &str) -> Command {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let mut cmd = if root {
        let mut c = Command::new("su");
        c.args(["postgres", "-s", "/bin/sh", "-c", command]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", command]);
        c
    };
    cmd.current_dir("/tmp");
    cmd
}

impl Node {
    /// An empty data directory the tools may write, on a free port.
    fn new(port: u16) -> Self {
        let data = std::env::temp_dir().join(format!("payments-test-pg-{port}"));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data).unwrap();
        // PostgreSQL refuses a data directory others may read.
        std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&data)
            .output();
        Self { port, data }
    }
}

impl Drop for ReplicatedPostgres {
    fn drop(&mut self) {
        for node in [&self.standby, &self.primary] {
            let stop = format!(
                "{} -D {} -m immediate -w stop",
                self.tool("pg_ctl"),
                node.data.display()
            );
            let _ = as_owner(&stop).output();
            let _ = std::fs::remove_dir_all(&node.data);
        }
    }
}

/// The newest PostgreSQL under /usr/lib/postgresql, or `PG_BIN`.
fn pg_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("PG_BIN") {
        return PathBuf::from(bin);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dir| {
            dir.filter_map(|e| e.ok().map(|e| e.path().join("bin")))
                .filter(|bin| Path::new(bin).join("pg_basebackup").exists())
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions
        .pop()
        .expect("PostgreSQL's server binaries under /usr/lib/postgresql (or PG_BIN)")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
