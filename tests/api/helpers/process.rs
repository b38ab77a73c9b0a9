//! The real binary in a process of its own, so a test can SIGKILL it.

use std::{
    net::TcpListener,
    process::{Child, Command, Stdio},
    time::Duration,
};

/// The real binary in its own process, so it can be SIGKILLed.
pub struct ServerProcess {
    pub child: Child,
    pub address: String,
    /// Where the child's stdout and stderr go.
    pub log: std::path::PathBuf,
}

impl ServerProcess {
    /// Starts `payments-api serve` on a free port with the demo key and extra environment.
    pub async fn start(database_url: &str, env: &[(&str, &str)]) -> Self {
        // Ask the OS for a free port, then hand it to the child.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log_path = std::env::temp_dir().join(format!("payments-api-test-{port}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_payments-api"))
            .arg("serve")
            .env("DATABASE_URL", database_url)
            .env("BIND_ADDR", format!("127.0.0.1:{port}"))
            .env("BOOTSTRAP_API_KEYS", "merchant-demo=merchant_demo")
            .envs(env.iter().copied())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start payments-api");
        let address = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while client
            .get(format!("{address}/healthz"))
            .send()
            .await
            .is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "payments-api did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self {
            child,
            address,
            log: log_path,
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // A failed test must not leave a server running.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

impl ServerProcess {
    /// Everything the server has logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the server has logged a line containing `needle`, and returns that line.
    pub async fn wait_for_log(&self, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(line) = self.logs().lines().find(|l| l.contains(needle)) {
                return line.to_owned();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no log line with {needle:?}:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
