//! A real chain per test: anvil on a free port with the devnet token deployed, `cast` (an
//! EIP-712 and transaction implementation that is not ours) to sign and send as the payer, and
//! the node's own RPC methods to mine, travel in time, snapshot and revert.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use payments_api::{
    config::{SettlementSettings, parse_chains, with_deposit_factories},
    rails::evm::devnet::{self, ANVIL_KEYS},
};
use serde_json::{Value, json};

/// The seed's token, anvil's first contract.
pub const TOKEN: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
/// Circle's USDC behind its proxy, as `payments-api devnet` deploys it.
pub const USDC: &str = "0x0C8E79F3534B00D9a3D4a856B665Bf4eBC22f2ba";
pub const PAYER: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
pub const PAYEE: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
pub const PAYER_KEY: &str = ANVIL_KEYS[1];
/// The key of `PAYEE`, the merchant's address: it signs refunds.
pub const PAYEE_KEY: &str = ANVIL_KEYS[2];
/// Anvil's fourth account pays the relayer's gas.
pub const RELAYER_KEY: &str = ANVIL_KEYS[3];
/// Anvil's fifth account: a second relayer key.
pub const SECOND_RELAYER_KEY: &str =
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a";

/// A pinned chain tool: `ANVIL_BIN` / `CAST_BIN`, else the npm install in `contracts/`.
fn tool(name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(format!("{}_BIN", name.to_uppercase())) {
        return path.into();
    }
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("contracts/node_modules/.bin")
        .join(name);
    assert!(
        local.exists(),
        "{name} is missing: run `make chain-tools` (npm ci in contracts/) or set {}_BIN",
        name.to_uppercase()
    );
    local
}

pub struct Anvil {
    child: Child,
    pub url: String,
    pub chain_id: u64,
}

impl Anvil {
    /// Anvil with the devnet token deployed (chain 31337, automine).
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    pub async fn start_with(args: &[&str]) -> Self {
        Self::start_as(31337, args).await
    }

    /// Anvil as chain `chain_id`, set up as every devnet is: the same contracts at the same
    /// addresses (one deployer, the same nonces), as tokens and factories deployed
    /// deterministically are on real chains.
    pub async fn start_as(chain_id: u64, args: &[&str]) -> Self {
        let anvil = Self::spawn(chain_id, args).await;
        devnet::set_up(&anvil.url.parse().unwrap())
            .await
            .expect("deploy the devnet token");
        anvil
    }

    /// A second node of this chain that forks from its head and then goes its own way: what a
    /// node serving blocks the others reorged away looks like.
    pub async fn fork(&self) -> Self {
        Self::spawn(self.chain_id, &["--fork-url", &self.url]).await
    }

    /// The node dies.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    async fn spawn(chain_id: u64, args: &[&str]) -> Self {
        let mut child = Command::new(tool("anvil"))
            .args(["--port", "0", "--chain-id", &chain_id.to_string()])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start anvil");
        let stdout = child.stdout.take().unwrap();
        let url = tokio::task::spawn_blocking(move || {
            let mut lines = BufReader::new(stdout).lines();
            let address = lines
                .by_ref()
                .map_while(Result::ok)
                .find_map(|line| line.strip_prefix("Listening on ").map(str::to_owned))
                .expect("anvil says where it listens");
            // Keep draining, or anvil blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            format!("http://{address}")
        })
        .await
        .unwrap();
        Self {
            child,
            url,
            chain_id,
        }
    }

    /// Settlement settings for this chain.
    pub fn settlement(&self, confirmations: u64) -> SettlementSettings {
        settlement_on(&[self], confirmations)
    }

    /// `evm:<chain id>`.
    pub fn name(&self) -> String {
        format!("evm:{}", self.chain_id)
    }
}

/// Settlement settings serving every one of `chains` at once, each with the devnet's factory.
pub fn settlement_on(chains: &[&Anvil], confirmations: u64) -> SettlementSettings {
    let list = |each: &dyn Fn(&Anvil) -> String| {
        chains.iter().map(|c| each(c)).collect::<Vec<_>>().join(",")
    };
    let factory = payments_api::rails::evm::deposit::devnet_factory();
    SettlementSettings {
        chains: with_deposit_factories(
            parse_chains(&list(&|c| format!("{}={}", c.name(), c.url))).unwrap(),
            &list(&|c| format!("{}={factory}", c.name())),
        )
        .unwrap(),
        confirmations,
        max_lag_blocks: 5,
        poll_interval: Duration::from_millis(50),
        relayer_private_key: None,
        replace_after_blocks: 2,
        low_balance_sends: 20,
        // A share the relayer tests fill in a few seconds.
        relayer_batch: 50,
        underpayment_tolerance_bps: 0,
        erc6492_factories: Vec::new(),
    }
}

impl Anvil {
    /// A JSON-RPC call to the node.
    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        let answer: Value = reqwest::Client::new()
            .post(&self.url)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    pub async fn mine(&self, blocks: u64) {
        self.rpc("anvil_mine", json!([format!("{blocks:#x}")]))
            .await;
    }

    pub async fn block_number(&self) -> u64 {
        let hex = self.rpc("eth_blockNumber", json!([])).await;
        u64::from_str_radix(hex.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
    }

    /// Runs `cast` against this node; returns its stdout, trimmed.
    pub fn cast(&self, args: &[&str]) -> String {
        self.try_cast(args)
            .unwrap_or_else(|stderr| panic!("cast {args:?}: {stderr}"))
    }

    /// Runs `cast`: its stdout, trimmed, or its stderr when it failed (a call that reverts).
    pub fn try_cast(&self, args: &[&str]) -> Result<String, String> {
        let output = Command::new(tool("cast"))
            .args(args)
            .env("ETH_RPC_URL", &self.url)
            .output()
            .expect("run cast");
        if output.status.success() {
            Ok(String::from_utf8(output.stdout).unwrap().trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    /// Deploys a test token from its artifact, `PAYER` holding 1 000 000 of it; returns its
    /// address.
    pub fn deploy_token(&self, artifact: &str) -> String {
        let argument = self.cast(&[
            "abi-encode",
            "constructor(address[],uint256)",
            &format!("[{PAYER}]"),
            "1000000000000",
        ]);
        self.deploy(PAYER_KEY, artifact, &argument)
    }

    /// Sends a transaction calling `signature` on `to` with `args`, signed by `key`.
    pub fn send(&self, key: &str, to: &str, signature: &str, args: &[&str]) {
        let mut all = vec!["send", "--private-key", key, to, signature];
        all.extend_from_slice(args);
        self.cast(&all);
    }

    /// `address`'s balance of the devnet token.
    pub fn balance(&self, address: &str) -> u128 {
        self.balance_of(TOKEN, address)
    }

    /// `address`'s balance of `token`.
    pub fn balance_of(&self, token: &str, address: &str) -> u128 {
        let out = self.cast(&["call", token, "balanceOf(address)(uint256)", address]);
        out.split_whitespace().next().unwrap().parse().unwrap()
    }

    /// The payer's signature of `typed_data`, made by cast.
    pub fn sign(&self, key: &str, typed_data: &Value) -> String {
        self.cast(&[
            "wallet",
            "sign",
            "--data",
            "--private-key",
            key,
            &typed_data.to_string(),
        ])
    }

    /// The payer submits the authorization in `typed_data` with `signature` themselves, to the
    /// token the document names.
    pub fn submit_as_payer(&self, typed_data: &Value, signature: &str) -> String {
        self.submit_as(PAYER_KEY, typed_data, signature)
    }

    /// The account of `key` submits the authorization in `typed_data` with `signature` (anyone
    /// may send it; the signature says whose money moves).
    pub fn submit_as(&self, key: &str, typed_data: &Value, signature: &str) -> String {
        let m = &typed_data["message"];
        let text = |v: &Value| v.as_str().unwrap().to_owned();
        self.cast(&[
            "send",
            "--private-key",
            key,
            &text(&typed_data["domain"]["verifyingContract"]),
            "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)",
            &text(&m["from"]),
            &text(&m["to"]),
            &text(&m["value"]),
            &text(&m["validAfter"]),
            &text(&m["validBefore"]),
            &text(&m["nonce"]),
            signature,
        ])
    }

    /// Deploys a smart-contract wallet (`contracts/src/OwnedWallet.sol`, ERC-1271) owned by
    /// `owner`'s key; returns its address.
    pub fn deploy_wallet(&self, owner: &str) -> String {
        let owner_address = self.cast(&["wallet", "address", "--private-key", owner]);
        let argument = self.cast(&["abi-encode", "constructor(address)", &owner_address]);
        let artifact = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/contracts/build/OwnedWallet.json"
        ));
        self.deploy(owner, artifact, &argument)
    }

    /// Deploys the contract of `artifact` from `key`'s account, with `argument` (its constructor's
    /// arguments, ABI-encoded); returns its checksummed address.
    pub fn deploy(&self, key: &str, artifact: &str, argument: &str) -> String {
        let artifact: Value = serde_json::from_str(artifact).unwrap();
        let code = format!(
            "{}{}",
            artifact["bytecode"].as_str().unwrap(),
            argument.trim_start_matches("0x")
        );
        let receipt: Value = serde_json::from_str(&self.cast(&[
            "send",
            "--private-key",
            key,
            "--json",
            "--create",
            &code,
        ]))
        .unwrap();
        let address = receipt["contractAddress"].as_str().unwrap();
        self.cast(&["to-check-sum-address", address])
    }

    /// The payer cancels the authorization in `typed_data` on chain (EIP-3009
    /// `cancelAuthorization`), signed by cast.
    pub fn cancel_as_payer(&self, typed_data: &Value) -> String {
        self.cancel_as(PAYER_KEY, typed_data)
    }

    /// The authorizer of `typed_data`, whose key is `key`, cancels it on chain.
    pub fn cancel_as(&self, key: &str, typed_data: &Value) -> String {
        let mut types = typed_data["types"].clone();
        types["CancelAuthorization"] = json!([
            {"name": "authorizer", "type": "address"},
            {"name": "nonce", "type": "bytes32"},
        ]);
        let m = &typed_data["message"];
        let cancel = json!({
            "types": types,
            "primaryType": "CancelAuthorization",
            "domain": typed_data["domain"],
            "message": {"authorizer": m["from"], "nonce": m["nonce"]},
        });
        let signature = self.sign(key, &cancel);
        let hex = signature.trim_start_matches("0x");
        let (r, s, v) = (&hex[..64], &hex[64..128], &hex[128..130]);
        let v = u8::from_str_radix(v, 16).unwrap().to_string();
        self.cast(&[
            "send",
            "--private-key",
            key,
            typed_data["domain"]["verifyingContract"].as_str().unwrap(),
            "cancelAuthorization(address,bytes32,uint8,bytes32,bytes32)",
            m["from"].as_str().unwrap(),
            m["nonce"].as_str().unwrap(),
            &v,
            &format!("0x{r}"),
            &format!("0x{s}"),
        ])
    }
}

/// The digests and signatures of `typed_data` by `key` as two wallets' libraries make them (viem
/// and ethers, pinned in `contracts/`): `{"viem": {"digest", "signature"}, "ethers": {…}}`.
pub fn wallet_signatures(typed_data: &Value, key: &str) -> Value {
    use std::io::Write;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("contracts/wallets.mjs");
    let mut child = Command::new("node")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run node (make chain-tools installs viem and ethers)");
    let input = json!({"typed_data": typed_data, "private_key": key}).to_string();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "contracts/wallets.mjs: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

impl Drop for Anvil {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The environment that turns settlement on for a `payments-api` child process.
pub fn settlement_env(rpc_url: &str, confirmations: u64, relayer: bool) -> Vec<(String, String)> {
    let mut env = vec![
        ("CHAINS".to_owned(), format!("evm:31337={rpc_url}")),
        (
            "DEPOSIT_FACTORIES".to_owned(),
            format!(
                "evm:31337={}",
                payments_api::rails::evm::deposit::devnet_factory()
            ),
        ),
        ("CHAIN_CONFIRMATIONS".to_owned(), confirmations.to_string()),
        ("CHAIN_POLL_INTERVAL_MS".to_owned(), "50".to_owned()),
        ("RELAYER_REPLACE_AFTER_BLOCKS".to_owned(), "2".to_owned()),
    ];
    if relayer {
        env.push(("RELAYER_PRIVATE_KEY".to_owned(), RELAYER_KEY.to_owned()));
    }
    env
}

/// A TCP gate in front of the node: while closed, every connection through it is cut and new
/// ones are dropped at once, as when a node goes down; opened again, it forwards as before.
pub struct Gate {
    pub url: String,
    open: tokio::sync::watch::Sender<bool>,
}

impl Gate {
    pub async fn start(upstream: &str) -> Self {
        let upstream = reqwest::Url::parse(upstream).unwrap();
        let upstream = format!(
            "{}:{}",
            upstream.host_str().unwrap(),
            upstream.port().unwrap()
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (open, watch) = tokio::sync::watch::channel(true);
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if !*watch.borrow() {
                    continue;
                }
                let upstream = upstream.clone();
                let mut watch = watch.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = watch.wait_for(|open| !open) => {}
                    }
                });
            }
        });
        Self { url, open }
    }

    pub fn close(&self) {
        self.open.send_replace(false);
    }

    pub fn open(&self) {
        self.open.send_replace(true);
    }
}

/// What settlement tests ask of the app.
impl super::TestApp {
    /// Creates an intent as the demo merchant; its id.
    pub async fn create_intent_id(&self, body: &str) -> String {
        let created = self.create_intent(super::DEMO_TOKEN, None, body).await;
        assert_eq!(created.status, 201, "{}", created.body);
        created.json()["id"].as_str().unwrap().to_owned()
    }

    /// The EIP-712 document the payer signs for intent `id`.
    pub async fn typed_data(&self, id: &str) -> Value {
        let answer = self.authorization(id).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.json()["typed_data"].clone()
    }

    /// GET …/authorization of the demo merchant's intent `id`, whatever it answers.
    pub async fn authorization(&self, id: &str) -> super::Answer {
        let path = format!("/v1/payment_intents/{id}/authorization");
        self.get_as(super::DEMO_TOKEN, &path).await
    }

    /// POST …/confirm with `signature`, under the key `confirm-<id>`.
    pub async fn confirm(&self, id: &str, signature: &str) -> super::Answer {
        let body = json!({ "signature": signature }).to_string();
        let path = format!("/v1/payment_intents/{id}/confirm");
        let key = format!("confirm-{id}");
        self.post_as(super::DEMO_TOKEN, &path, Some(&key), &body)
            .await
    }

    /// Waits until the listener followed `anvil` up to its current head.
    pub async fn wait_for_listener(&self, anvil: &Anvil) {
        let head = anvil.block_number().await;
        let followed = format!("(SELECT block_number FROM chain_cursors) >= {head}");
        self.wait_until(&format!("the listener reached block {head}"), &followed)
            .await;
    }

    /// The intent's state now, as the API shows it.
    pub async fn state_of(&self, id: &str) -> String {
        let intent = self.get_intent(super::DEMO_TOKEN, id).await.json();
        intent["state"].as_str().unwrap().to_owned()
    }

    /// The types of the events about `id` (an intent or a refund), oldest first.
    pub async fn event_types(&self, id: &str) -> Vec<String> {
        sqlx::query_scalar("SELECT type FROM events WHERE subject_id = $1 ORDER BY subject_version")
            .bind(id)
            .fetch_all(&self.db)
            .await
            .unwrap()
    }

    pub async fn wait_for_refund(&self, id: &str, state: &str) {
        self.wait_until(
            &format!("{id} is {state}"),
            &format!("(SELECT state FROM refunds WHERE id = '{id}') = '{state}'"),
        )
        .await;
    }

    /// Mines a block at a time until `condition_sql` holds: for work the app sends to the chain
    /// itself (a sweep), whose confirmation needs blocks after it. Panics after 30 s.
    pub async fn mine_until(&self, anvil: &Anvil, what: &str, condition_sql: &str) {
        self.wait_doing(what, condition_sql, || async {
            anvil.mine(1).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        })
        .await
    }

    /// Waits until the app followed `chain` up to its head as it is now.
    pub async fn followed(&self, chain: &Anvil) {
        let head = chain.block_number().await;
        self.wait_until(
            &format!("{} followed to block {head}", chain.name()),
            &format!(
                "(SELECT block_number FROM chain_cursors WHERE chain_id = {}) >= {head}",
                chain.chain_id
            ),
        )
        .await;
    }

    /// Mines `chain` until the app has followed it past the block that is its head now.
    pub async fn mine_until_followed(&self, chain: &Anvil) {
        let head = chain.block_number().await;
        self.mine_until(
            chain,
            &format!("{} followed past block {head}", chain.name()),
            &format!(
                "(SELECT block_number FROM chain_cursors WHERE chain_id = {}) >= {head}",
                chain.chain_id
            ),
        )
        .await;
    }

    pub async fn wait_for_state(&self, id: &str, state: &str) {
        self.wait_until(
            &format!("{id} is {state}"),
            &format!("(SELECT state FROM payment_intents WHERE id = '{id}') = '{state}'"),
        )
        .await;
    }
}

/// The app settling on `anvil` after `confirmations`, its relayer sending with `RELAYER_KEY` when
/// `relayer` (without it, what is queued stays queued).
/// The time of the chain's latest block.
pub async fn chain_time(anvil: &Anvil) -> u64 {
    let block = anvil
        .rpc("eth_getBlockByNumber", json!(["latest", false]))
        .await;
    u64::from_str_radix(
        block["timestamp"]
            .as_str()
            .unwrap()
            .trim_start_matches("0x"),
        16,
    )
    .unwrap()
}

pub async fn app_on(anvil: &Anvil, confirmations: u64, relayer: bool) -> super::TestApp {
    app_on_with(anvil, confirmations, relayer, |_| {}).await
}

/// The app settling on every one of `chains` at once, its relayer sending on each with
/// `RELAYER_KEY` when `relayer`.
pub async fn app_on_chains(chains: &[&Anvil], confirmations: u64, relayer: bool) -> super::TestApp {
    let settlement = settlement_on(chains, confirmations);
    super::TestApp::spawn_with(move |s| {
        s.settlement = settlement;
        if relayer {
            s.settlement.relayer_private_key = Some(RELAYER_KEY.to_owned());
        }
    })
    .await
}

/// [`app_on`], then `configure`d.
pub async fn app_on_with(
    anvil: &Anvil,
    confirmations: u64,
    relayer: bool,
    configure: impl FnOnce(&mut payments_api::config::Settings) + Send + 'static,
) -> super::TestApp {
    let settlement = anvil.settlement(confirmations);
    super::TestApp::spawn_with(move |s| {
        s.settlement = settlement;
        if relayer {
            s.settlement.relayer_private_key = Some(RELAYER_KEY.to_owned());
        }
        configure(s);
    })
    .await
}
