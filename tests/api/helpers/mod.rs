//! Test harness, by concern: a real PostgreSQL and a fresh database per test ([`database`]), the app
//! served in this process ([`app`]), the real binary in a process of its own ([`process`]), a
//! lock that stalls intent inserts from outside the app ([`blocker`]), a proxy that breaks the
//! network between the app and its database ([`proxy`]), a webhook receiver ([`receiver`]), a
//! primary with a hot standby to fail over ([`replicated`]), a real chain with the devnet token
//! ([`chain`]), and a proxy to it that kills the app between a broadcast and its record
//! ([`rpc_fault`]).

mod app;
pub mod blocker;
pub mod chain;
mod database;
mod process;
mod proxy;
mod receiver;
mod replicated;
mod rpc_fault;

pub use app::{Answer, TestApp, serve, spawn_create, spawn_create_as, test_settings};
pub use database::{empty_database, fresh_database, missing_database};
pub use process::ServerProcess;
pub use proxy::Fault;
pub use receiver::{Received, Receiver, Reply};
pub use replicated::ReplicatedPostgres;
pub use rpc_fault::RpcFaultProxy;

pub const DEMO_TOKEN: &str = "merchant-demo";
pub const DEMO_MERCHANT: &str = "merchant_demo";
pub const OTHER_TOKEN: &str = "merchant-other";
pub const OTHER_MERCHANT: &str = "merchant_other";

/// The request of the README's transcript.
pub const SEED_BODY: &str = r#"{"chain":"evm:31337","token":"0x5FbDB2315678afecb367f032d93F642f64180aa3","payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","merchant":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","amount":"100000000","expires_in_seconds":900}"#;

/// The seed body with another amount.
pub fn body_with_amount(amount: &str) -> String {
    SEED_BODY.replace(
        r#""amount":"100000000""#,
        &format!(r#""amount":"{amount}""#),
    )
}

/// SHA-256 of `METHOD \n PATH \n BODY`, computed independently of the server (`docs/api.md`).
pub fn fingerprint(method: &str, path: &str, body: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(format!("{method}\n{path}\n{body}").as_bytes()).into()
}

pub fn short_fingerprint(method: &str, path: &str, body: &str) -> String {
    hex::encode(&fingerprint(method, path, body)[..8])
}
