//! Settings of the `payments-api` binary: every one is an environment variable (README,
//! "Configuration"), mirrored by a flag of the same meaning so `payments-api --help` documents
//! them all.

use std::{
    net::{SocketAddr, ToSocketAddrs},
    time::Duration,
};

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "payments-api",
    version,
    about = "Payment-intent API: one Idempotency-Key, one execution, one answer"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Settings for `serve`, the default command.
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API (the default when no command is given).
    Serve(Box<ServeArgs>),
    /// Create the database if it is missing and apply the migrations, then exit.
    Migrate(DatabaseArgs),
    /// Manage API keys.
    #[command(subcommand)]
    ApiKeys(ApiKeysCommand),
    /// The people who sign in to a merchant's dashboard (`docs/dashboard.md`).
    #[command(subcommand)]
    Users(UsersCommand),
    /// A merchant's own request rate and concurrency limits (`docs/design.md`, "Per-merchant
    /// limits"); every replica applies a change within a few seconds.
    #[command(subcommand)]
    Limits(LimitsCommand),
    /// Print the OpenAPI 3.1 document (the committed `openapi.json`).
    Openapi,
    /// Compare the ledger with the chain's transfers to merchant addresses; exit 1 on any difference.
    Reconcile {
        /// The chain to reconcile, `evm:<chain id>`; its RPC URL comes from `CHAINS`.
        #[arg(long)]
        chain: String,
        /// `evm:<chain id>=<rpc url>[,...]`, as for `serve`.
        #[arg(long, env = "CHAINS")]
        chains: String,
        /// Transfers in the newest blocks are not compared until they have these confirmations.
        #[arg(long, env = "CHAIN_CONFIRMATIONS", default_value_t = 12)]
        confirmations: u64,
        /// Per chain, as for `serve`: a chain it names is compared up to its done block instead.
        #[arg(long, env = "CHAIN_FINALITY")]
        chain_finality: Option<String>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Deploy the devnet token on a fresh anvil (idempotent; needs no database).
    Devnet {
        /// The anvil node's JSON-RPC URL.
        #[arg(long, env = "DEVNET_RPC_URL", default_value = "http://127.0.0.1:8545")]
        rpc_url: url::Url,
    },
}

#[derive(Debug, Subcommand)]
pub enum ApiKeysCommand {
    /// Print a new random token for a merchant (`sk_live_…`); only its SHA-256 hash is stored,
    /// with its prefix to name it by.
    Create {
        /// The merchant account the token authenticates as.
        #[arg(long)]
        merchant: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// List a merchant's keys: prefix, created, last used, expiry, revocation; never a secret.
    List {
        #[arg(long)]
        merchant: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Revoke the key with this prefix (as `list` shows it): refused on every replica within a
    /// second.
    Revoke {
        prefix: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Print a new key for a merchant, and let its other live keys expire after an overlap.
    Rotate {
        #[arg(long)]
        merchant: String,
        /// Seconds the old keys keep working, while servers move to the new one.
        #[arg(long)]
        old_expires_in: u64,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Add a person to a merchant's team and print their one-time link to set a password (it
    /// works once, for 24 hours).
    Create {
        #[arg(long)]
        merchant: String,
        /// Their email: the name they sign in with.
        #[arg(long)]
        email: String,
        /// `owner`, `developer` or `viewer`.
        #[arg(long)]
        role: String,
        /// Where the dashboard is reached: the link is `<this>/dashboard/password?token=…`.
        #[arg(long, env = "PUBLIC_BASE_URL", default_value = "http://localhost:8080")]
        public_base_url: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum LimitsCommand {
    /// Set a merchant's limits; a limit not given is the default again, 0 is unlimited.
    Set {
        #[arg(long)]
        merchant: String,
        /// Requests per second, across every replica.
        #[arg(long)]
        rate: Option<u32>,
        /// Requests in flight at once, across every replica.
        #[arg(long)]
        concurrency: Option<u32>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Print a merchant's own limits (`default` where it has none).
    Show {
        #[arg(long)]
        merchant: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL connection string; several hosts (`h1:5432,h2:5432`) with
    /// `target_session_attrs=read-write` follow the primary across a failover.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Largest number of pooled database connections for requests.
    #[arg(long, env = "DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,
}

impl DatabaseArgs {
    pub fn url(&self) -> anyhow::Result<&str> {
        self.database_url
            .as_deref()
            .context("DATABASE_URL is required (e.g. postgres://postgres@127.0.0.1:5432/payments)")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Pretty,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// Address the HTTP server listens on: `host:port`, the host a name or an IP address.
    #[arg(long, env = "BIND_ADDR", default_value = "0.0.0.0:8080")]
    pub bind_addr: String,

    /// How long a claimed Idempotency-Key blocks retries before another attempt may take over.
    #[arg(long, env = "IDEMPOTENCY_LEASE_SECONDS", default_value_t = 30)]
    pub idempotency_lease_seconds: u64,

    /// How long a key and its stored response are kept, counted from the first claim.
    #[arg(long, env = "IDEMPOTENCY_KEY_TTL_SECONDS", default_value_t = 86_400)]
    pub idempotency_key_ttl_seconds: u64,

    /// Reject a POST without an Idempotency-Key (400 idempotency_key_missing).
    #[arg(long, env = "IDEMPOTENCY_KEY_REQUIRED", default_value_t = false, action = clap::ArgAction::Set)]
    pub idempotency_key_required: bool,

    /// A request still running after this long is abandoned and its transaction rolled back.
    #[arg(long, env = "REQUEST_TIMEOUT_SECONDS", default_value_t = 25)]
    pub request_timeout_seconds: u64,

    /// Largest request body accepted; a larger one gets 413 payload_too_large.
    #[arg(long, env = "MAX_BODY_BYTES", default_value_t = 65_536)]
    pub max_body_bytes: usize,

    /// How often the background sweepers run.
    #[arg(long, env = "SWEEP_INTERVAL_SECONDS", default_value_t = 10)]
    pub sweep_interval_seconds: u64,

    /// API tokens upserted at start-up: "token=merchant_id[,token=merchant_id...]".
    #[arg(long, env = "BOOTSTRAP_API_KEYS", hide_env_values = true)]
    pub bootstrap_api_keys: Option<String>,

    /// Where payers reach this server: intents' `checkout_url` is `<this>/checkout/<id>#<secret>`.
    #[arg(long, env = "PUBLIC_BASE_URL", default_value = "http://localhost:8080")]
    pub public_base_url: String,

    /// How long a webhook endpoint has to answer before the attempt counts as failed.
    #[arg(long, env = "WEBHOOK_TIMEOUT_SECONDS", default_value_t = 10)]
    pub webhook_timeout_seconds: u64,

    /// The first retry of a failed webhook delivery comes after this; each next one waits about
    /// twice as long (with jitter), for up to three days.
    #[arg(long, env = "WEBHOOK_RETRY_BASE_SECONDS", default_value_t = 5)]
    pub webhook_retry_base_seconds: u64,

    /// How long a webhook delivery is retried before it is marked failed (a person can resend it
    /// from the dashboard then). 0: a delivery fails at its first failed attempt.
    #[arg(long, env = "WEBHOOK_RETRY_FOR_SECONDS", default_value_t = WebhookSettings::RETRY_FOR.as_secs())]
    pub webhook_retry_for_seconds: u64,

    /// Whether this replica delivers webhooks. `false` for replicas that only serve requests
    /// while others deliver: delivery competes with requests for CPU, and the events wait in
    /// PostgreSQL for whichever replica delivers.
    #[arg(long, env = "WEBHOOK_DELIVERY", default_value_t = true, action = clap::ArgAction::Set)]
    pub webhook_delivery: bool,

    /// Accept `http://` webhook endpoints (development only; production endpoints use https).
    #[arg(long, env = "WEBHOOK_ALLOW_HTTP", default_value_t = false, action = clap::ArgAction::Set)]
    pub webhook_allow_http: bool,

    /// Deliver to loopback, private, link-local and other non-public addresses (development and
    /// tests only: otherwise a merchant could make the server call into its own network).
    #[arg(long, env = "WEBHOOK_ALLOW_PRIVATE_NETWORKS", default_value_t = false, action = clap::ArgAction::Set)]
    pub webhook_allow_private_networks: bool,

    /// Chains whose intents settle on chain: "evm:<chain id>=<rpc url>[,...]". Unset: settlement
    /// is off and intents may name any chain.
    #[arg(long, env = "CHAINS")]
    pub chains: Option<String>,

    /// Confirmations a block needs before its payments settle intents (1 = the head itself).
    #[arg(long, env = "CHAIN_CONFIRMATIONS", default_value_t = 12)]
    pub chain_confirmations: u64,

    /// With several endpoints for a chain: how far behind the highest head the endpoint reads go
    /// to may fall before they move to another.
    #[arg(long, env = "CHAIN_MAX_LAG_BLOCKS", default_value_t = 5)]
    pub chain_max_lag_blocks: u64,

    /// How often the follower and the relayers look at each chain, in milliseconds.
    #[arg(long, env = "CHAIN_POLL_INTERVAL_MS", default_value_t = 1000)]
    pub chain_poll_interval_ms: u64,

    /// The relayer's key (0x + 64 hex digits), which pays the gas of submitted authorizations.
    /// Unset: nothing is submitted; payers submit their own authorizations.
    #[arg(long, env = "RELAYER_PRIVATE_KEY", hide_env_values = true)]
    pub relayer_private_key: Option<String>,

    /// Blocks a relayed transaction may wait unmined before it is replaced with higher fees.
    #[arg(long, env = "RELAYER_REPLACE_AFTER_BLOCKS", default_value_t = 3)]
    pub relayer_replace_after_blocks: u64,

    /// The most the relayer pays per gas, per chain: "evm:<chain id>=<gwei>[,...]". While the
    /// chain's fee is above it the relayer waits (`pending_reason: gas_price_above_cap`); no
    /// transaction or replacement offers more. A chain it does not name has no cap.
    #[arg(long, env = "RELAYER_MAX_FEE_GWEI")]
    pub relayer_max_fee_gwei: Option<String>,

    /// A relayer key whose native balance pays fewer sends than this, at the chain's fee now, is
    /// low: logged once (and once when it recovers) and said by `/readyz`.
    #[arg(long, env = "RELAYER_LOW_BALANCE_SENDS", default_value_t = 20)]
    pub relayer_low_balance_sends: u64,

    /// Submissions a relayer key looks at per round, of each state (queued, sent): about what
    /// one block holds, so a burst of payments goes out in one round.
    #[arg(long, env = "RELAYER_BATCH", default_value_t = 500)]
    pub relayer_batch: u32,

    /// The deposit-address factory (`contracts/src/DepositForwarder.sol`) on each chain that
    /// offers `payment_method: deposit_address`: "evm:<chain id>=<address>[,...]". A chain
    /// without one takes authorization intents only.
    #[arg(long, env = "DEPOSIT_FACTORIES")]
    pub deposit_factories: Option<String>,

    /// When a block is done, per chain: "evm:<chain id>=<confirmations|safe|finalized>[,...]"
    /// (`safe` and `finalized`: the node's own heads of those names). A chain it does not name
    /// takes `CHAIN_CONFIRMATIONS`.
    #[arg(long, env = "CHAIN_FINALITY")]
    pub chain_finality: Option<String>,

    /// How much less than its amount a deposit intent may receive and still succeed, in basis
    /// points of the amount (0 to 9999; 0: the whole amount must arrive).
    #[arg(long, env = "DEPOSIT_UNDERPAYMENT_TOLERANCE_BPS", default_value_t = 0)]
    pub deposit_underpayment_tolerance_bps: u32,

    /// The wallet factories whose undeployed wallets may pay through x402 with an ERC-6492
    /// signature: "0x<address>[,...]", on every chain. Empty (the default): such payments are
    /// refused (`eip6492_factory_not_allowed`).
    #[arg(long, env = "X402_ERC6492_FACTORIES")]
    pub x402_erc6492_factories: Option<String>,

    /// Connections of the background work's own pool (webhook delivery, sweepers, relayer,
    /// listener, `/readyz`), apart from the requests' `DB_MAX_CONNECTIONS`.
    #[arg(long, env = "DB_BACKGROUND_CONNECTIONS", default_value_t = 8)]
    pub db_background_connections: u32,

    /// `/v1` requests working at the database at once, merchants taking turns when more want to;
    /// by default twice the cores this process sees, at most the request pool less one, and a
    /// merchant alone may take up to the pool less one. A given number is fixed.
    #[arg(long, env = "DB_REQUEST_TURNS")]
    pub db_request_turns: Option<u32>,

    /// A request that would wait longer than this for a database connection gets 503 with
    /// `Retry-After` at once.
    #[arg(long, env = "DB_WAIT_TIMEOUT_MS", default_value_t = 500)]
    pub db_wait_timeout_ms: u64,

    /// Requests per second per merchant, across every replica; 0 is unlimited.
    #[arg(long, env = "MERCHANT_RATE_LIMIT", default_value_t = 100)]
    pub merchant_rate_limit: u32,

    /// Requests in flight at once per merchant, across every replica; 0 is unlimited.
    #[arg(long, env = "MERCHANT_CONCURRENCY_LIMIT", default_value_t = 100)]
    pub merchant_concurrency_limit: u32,

    /// The longest a request refused by its merchant's limits waits before its 429 is sent (each
    /// waits between half of it and all of it), which slows a retry loop on each of its
    /// connections; below 1000 (the shortest `Retry-After`), 0 answers at once.
    #[arg(long, env = "MERCHANT_REFUSAL_PAUSE_MS",
          default_value_t = MerchantLimits::REFUSAL_PAUSE.as_millis() as u64)]
    pub merchant_refusal_pause_ms: u64,

    /// Log line format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty)]
    pub log_format: LogFormat,

    /// Create the database if missing and apply migrations before serving.
    #[arg(long)]
    pub migrate: bool,
}

/// The validated settings the application runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub database_url: String,
    pub db_max_connections: u32,
    pub db_background_connections: u32,
    /// `DB_REQUEST_TURNS` as given; `tenants::Turns::for_pool` caps it by the pool.
    pub db_request_turns: Option<u32>,
    /// How long a request may wait for a pooled connection before it is answered 503.
    pub db_wait_timeout: Duration,
    pub merchant_limits: MerchantLimits,
    pub bind_addr: SocketAddr,
    pub idempotency: IdempotencySettings,
    pub request_timeout: Duration,
    pub max_body_bytes: usize,
    pub sweep_interval: Duration,
    pub bootstrap_api_keys: Vec<(String, String)>,
    /// `http(s)://host[:port][/path]`, without a trailing slash.
    pub public_base_url: String,
    pub webhooks: WebhookSettings,
    pub settlement: SettlementSettings,
}

/// The default limits of every merchant (`docs/design.md`, "Per-merchant limits"); 0 is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MerchantLimits {
    pub rate_per_second: u32,
    pub concurrency: u32,
    /// How often a replica says it is alive and reads the merchants' own limits.
    pub refresh_every: Duration,
    /// The longest a refused request waits before its 429 is sent (each waits between half of
    /// it and all of it).
    pub refusal_pause: Duration,
}

impl MerchantLimits {
    pub const REFRESH_EVERY: Duration = Duration::from_secs(2);
    pub const REFUSAL_PAUSE: Duration = Duration::from_millis(100);

    /// No limit at all.
    pub fn unlimited() -> Self {
        Self {
            rate_per_second: 0,
            concurrency: 0,
            refresh_every: Self::REFRESH_EVERY,
            refusal_pause: Self::REFUSAL_PAUSE,
        }
    }
}

/// Settlement on chain (`docs/settlement.md`): off when `chains` is empty.
#[derive(Clone)]
pub struct SettlementSettings {
    pub chains: Vec<ChainEndpoint>,
    pub confirmations: u64,
    /// How far the endpoint a chain's reads go to may lag the highest head (`CHAIN_MAX_LAG_BLOCKS`).
    pub max_lag_blocks: u64,
    pub poll_interval: Duration,
    /// 0x + 64 hex digits; never logged.
    pub relayer_private_key: Option<String>,
    pub replace_after_blocks: u64,
    /// Sends a relayer key's balance must pay for not to be low (`RELAYER_LOW_BALANCE_SENDS`).
    pub low_balance_sends: u64,
    /// Submissions a relayer key looks at per round, of each state.
    pub relayer_batch: u32,
    /// Basis points of its amount a deposit intent may fall short by and still succeed.
    pub underpayment_tolerance_bps: u32,
    /// The factories whose undeployed wallets may pay with an ERC-6492 signature
    /// (`X402_ERC6492_FACTORIES`); none by default.
    pub erc6492_factories: Vec<alloy::primitives::Address>,
}

impl SettlementSettings {
    pub fn off() -> Self {
        Self {
            chains: Vec::new(),
            confirmations: 12,
            max_lag_blocks: 5,
            poll_interval: Duration::from_secs(1),
            relayer_private_key: None,
            replace_after_blocks: 3,
            low_balance_sends: 20,
            relayer_batch: 500,
            underpayment_tolerance_bps: 0,
            erc6492_factories: Vec::new(),
        }
    }

    /// When a block of `chain` is done: its own finality, else `CHAIN_CONFIRMATIONS`.
    pub fn finality_of(&self, chain: &ChainEndpoint) -> Finality {
        chain
            .finality
            .unwrap_or(Finality::Confirmations(self.confirmations))
    }

    /// The served chain an intent names (`evm:<id>`), if settlement serves it.
    pub fn chain(&self, name: &str) -> Option<&ChainEndpoint> {
        self.chains.iter().find(|chain| chain.name == name)
    }

    pub fn chain_names(&self) -> Vec<String> {
        self.chains.iter().map(|chain| chain.name.clone()).collect()
    }
}

impl std::fmt::Debug for SettlementSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettlementSettings")
            .field("chains", &self.chains)
            .field("confirmations", &self.confirmations)
            .field("max_lag_blocks", &self.max_lag_blocks)
            .field("poll_interval", &self.poll_interval)
            .field(
                "relayer",
                &self.relayer_private_key.as_ref().map(|_| "<set>"),
            )
            .field("replace_after_blocks", &self.replace_after_blocks)
            .field("low_balance_sends", &self.low_balance_sends)
            .field("relayer_batch", &self.relayer_batch)
            .field(
                "underpayment_tolerance_bps",
                &self.underpayment_tolerance_bps,
            )
            .field("erc6492_factories", &self.erc6492_factories)
            .finish()
    }
}

/// When a block is done on a chain (`CHAIN_FINALITY`; `rails::finality`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finality {
    /// This many confirmations; the block itself is the first.
    Confirmations(u64),
    /// The node's `safe` head.
    Safe,
    /// The node's `finalized` head.
    Finalized,
}

impl Finality {
    /// `12`, `safe` or `finalized`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        match raw.trim() {
            "safe" => Ok(Self::Safe),
            "finalized" => Ok(Self::Finalized),
            count => match count.parse::<u64>() {
                Ok(0) | Err(_) => Err(format!(
                    "{count:?} is not a number of confirmations (at least 1), safe or finalized"
                )),
                Ok(n) => Ok(Self::Confirmations(n)),
            },
        }
    }
}

/// One chain that settlement serves: `evm:<id>` and the JSON-RPC URL of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainEndpoint {
    /// `evm:<id>`, as intents name it.
    pub name: String,
    pub id: u64,
    /// The first of `rpc_urls`: where one-off commands (`reconcile`) ask.
    pub rpc_url: url::Url,
    /// Every JSON-RPC endpoint of the chain, in the order `CHAINS` gives them (`rails::endpoints`).
    pub rpc_urls: Vec<url::Url>,
    /// The deposit-address factory here, if this chain offers deposit addresses.
    pub deposit_factory: Option<alloy::primitives::Address>,
    /// When a block is done here (`CHAIN_FINALITY`); `None`: `CHAIN_CONFIRMATIONS`.
    pub finality: Option<Finality>,
    /// The most the relayer offers per gas here, in wei (`RELAYER_MAX_FEE_GWEI`); `None`: no cap.
    pub max_fee_per_gas: Option<u128>,
}

/// Parses `evm:<chain id>=<rpc url>[,<rpc url>...][,...]`: a URL after a chain's is another
/// endpoint of it. Blanks around entries are ignored.
pub fn parse_chains(spec: &str) -> anyhow::Result<Vec<ChainEndpoint>> {
    let mut chains: Vec<ChainEndpoint> = Vec::new();
    let rpc_url = |name: &str, url: &str| {
        url::Url::parse(url.trim())
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .with_context(|| format!("CHAINS: the RPC URL of {name} must be http(s)://…"))
    };
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if entry.starts_with("http://") || entry.starts_with("https://") {
            let chain = chains.last_mut().with_context(|| {
                format!("CHAINS must start with evm:<chain id>=<rpc url>, not {entry:?}")
            })?;
            let url = rpc_url(&chain.name, entry)?;
            if chain.rpc_urls.contains(&url) {
                bail!("CHAINS names an endpoint of {} twice", chain.name);
            }
            chain.rpc_urls.push(url);
            continue;
        }
        let (name, url) = entry.split_once('=').with_context(|| {
            format!("CHAINS entry {entry:?} must look like evm:<chain id>=<rpc url>")
        })?;
        let id = name
            .strip_prefix("evm:")
            .filter(|id| !id.starts_with('0'))
            .and_then(|id| id.parse::<u64>().ok())
            .with_context(|| format!("CHAINS: {name:?} is not evm:<chain id>"))?;
        let url = rpc_url(name, url)?;
        if chains.iter().any(|c| c.id == id) {
            bail!("CHAINS names {name} twice");
        }
        chains.push(ChainEndpoint {
            name: name.to_owned(),
            id,
            rpc_url: url.clone(),
            rpc_urls: vec![url],
            deposit_factory: None,
            finality: None,
            max_fee_per_gas: None,
        });
    }
    Ok(chains)
}

/// Sets one setting of the chains an `evm:<chain id>=<value>[,...]` list names (`variable`):
/// each value read by `read`, a chain `CHAINS` does not serve refused.
fn per_chain<T>(
    mut chains: Vec<ChainEndpoint>,
    spec: &str,
    variable: &str,
    read: impl Fn(&str) -> Result<T, String>,
    set: impl Fn(&mut ChainEndpoint, T),
) -> anyhow::Result<Vec<ChainEndpoint>> {
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, value) = entry.split_once('=').with_context(|| {
            format!("{variable} entry {entry:?} must look like evm:<chain id>=<value>")
        })?;
        let chain = chains
            .iter_mut()
            .find(|c| c.name == name.trim())
            .with_context(|| format!("{variable} names {name}, which CHAINS does not"))?;
        let value =
            read(value.trim()).map_err(|why| anyhow::anyhow!("{variable} for {name}: {why}"))?;
        set(chain, value);
    }
    Ok(chains)
}

/// Sets each chain's deposit-address factory from `DEPOSIT_FACTORIES`,
/// `evm:<chain id>=<address>[,...]`.
pub fn with_deposit_factories(
    chains: Vec<ChainEndpoint>,
    spec: &str,
) -> anyhow::Result<Vec<ChainEndpoint>> {
    let read = |address: &str| {
        address
            .parse()
            .map_err(|_| "the factory must be 0x + 40 hex digits".to_owned())
    };
    per_chain(chains, spec, "DEPOSIT_FACTORIES", read, |chain, factory| {
        chain.deposit_factory = Some(factory);
    })
}

/// Sets each chain's finality from `CHAIN_FINALITY`,
/// `evm:<chain id>=<confirmations|safe|finalized>[,...]`; a chain it does not name keeps
/// `CHAIN_CONFIRMATIONS`.
pub fn with_finality(chains: Vec<ChainEndpoint>, spec: &str) -> anyhow::Result<Vec<ChainEndpoint>> {
    per_chain(
        chains,
        spec,
        "CHAIN_FINALITY",
        Finality::parse,
        |chain, finality| {
            chain.finality = Some(finality);
        },
    )
}

/// Sets each chain's fee cap from `RELAYER_MAX_FEE_GWEI`, `evm:<chain id>=<gwei>[,...]` (a
/// decimal: `0.05` on an L2).
pub fn with_fee_caps(chains: Vec<ChainEndpoint>, spec: &str) -> anyhow::Result<Vec<ChainEndpoint>> {
    let read = |gwei: &str| {
        alloy::primitives::utils::parse_units(gwei, "gwei")
            .ok()
            .filter(|w| !w.is_negative())
            .and_then(|w| u128::try_from(w.get_absolute()).ok())
            .filter(|&w| w > 0)
            .ok_or_else(|| format!("{gwei:?} is not a positive number of gwei"))
    };
    per_chain(chains, spec, "RELAYER_MAX_FEE_GWEI", read, |chain, wei| {
        chain.max_fee_per_gas = Some(wei);
    })
}

/// How webhooks are delivered (`docs/api.md`, "Webhooks").
#[derive(Debug, Clone, Copy)]
pub struct WebhookSettings {
    pub timeout: Duration,
    pub retry_base: Duration,
    /// How long a delivery is retried before it is marked failed.
    pub retry_for: Duration,
    /// How long an endpoint may fail every attempt before it is disabled.
    pub disable_after: Duration,
    pub allow_http: bool,
    pub allow_private_networks: bool,
    /// This replica runs the delivery worker.
    pub deliver: bool,
}

impl WebhookSettings {
    pub const RETRY_FOR: Duration = Duration::from_secs(3 * 86_400);
    pub const DISABLE_AFTER: Duration = Duration::from_secs(5 * 86_400);
}

#[derive(Debug, Clone, Copy)]
pub struct IdempotencySettings {
    pub lease: Duration,
    pub retention: Duration,
    pub key_required: bool,
}

/// `host:port` as an address to bind; a name (`localhost:8080`) is resolved, IPv4 first.
fn resolve_bind_addr(raw: &str) -> anyhow::Result<SocketAddr> {
    let addresses: Vec<SocketAddr> = raw
        .to_socket_addrs()
        .with_context(|| format!("BIND_ADDR {raw:?} is not a host:port that resolves"))?
        .collect();
    addresses
        .iter()
        .find(|a| a.is_ipv4())
        .or(addresses.first())
        .copied()
        .with_context(|| format!("BIND_ADDR {raw:?} resolves to no address"))
}

impl ServeArgs {
    pub fn settings(&self) -> anyhow::Result<Settings> {
        let lease = Duration::from_secs(self.idempotency_lease_seconds);
        let request_timeout = Duration::from_secs(self.request_timeout_seconds);
        // A request must give up before its lease runs out, or a retry could take over
        // while the first attempt is still working and two executions would overlap.
        if request_timeout >= lease {
            bail!(
                "REQUEST_TIMEOUT_SECONDS ({}) must be shorter than IDEMPOTENCY_LEASE_SECONDS ({})",
                self.request_timeout_seconds,
                self.idempotency_lease_seconds
            );
        }
        if self.idempotency_key_ttl_seconds <= self.idempotency_lease_seconds {
            bail!("IDEMPOTENCY_KEY_TTL_SECONDS must be longer than IDEMPOTENCY_LEASE_SECONDS");
        }
        if self.merchant_refusal_pause_ms >= 1000 {
            bail!(
                "MERCHANT_REFUSAL_PAUSE_MS must be below 1000: a refusal tells the client to wait a second"
            );
        }
        if self.sweep_interval_seconds == 0 || self.request_timeout_seconds == 0 {
            bail!("SWEEP_INTERVAL_SECONDS and REQUEST_TIMEOUT_SECONDS must be at least 1");
        }
        Ok(Settings {
            database_url: self.database.url()?.to_owned(),
            db_max_connections: self.database.db_max_connections.max(2),
            db_background_connections: self.db_background_connections.max(2),
            db_request_turns: self.db_request_turns,
            db_wait_timeout: Duration::from_millis(self.db_wait_timeout_ms.max(1)),
            merchant_limits: MerchantLimits {
                rate_per_second: self.merchant_rate_limit,
                concurrency: self.merchant_concurrency_limit,
                refresh_every: MerchantLimits::REFRESH_EVERY,
                refusal_pause: Duration::from_millis(self.merchant_refusal_pause_ms),
            },
            bind_addr: resolve_bind_addr(&self.bind_addr)?,
            idempotency: IdempotencySettings {
                lease,
                retention: Duration::from_secs(self.idempotency_key_ttl_seconds),
                key_required: self.idempotency_key_required,
            },
            request_timeout,
            max_body_bytes: self.max_body_bytes,
            sweep_interval: Duration::from_secs(self.sweep_interval_seconds),
            bootstrap_api_keys: parse_bootstrap_api_keys(
                self.bootstrap_api_keys.as_deref().unwrap_or(""),
            )?,
            public_base_url: parse_public_base_url(&self.public_base_url)?,
            webhooks: WebhookSettings {
                timeout: Duration::from_secs(self.webhook_timeout_seconds.max(1)),
                retry_base: Duration::from_secs(self.webhook_retry_base_seconds.max(1)),
                retry_for: Duration::from_secs(self.webhook_retry_for_seconds),
                disable_after: WebhookSettings::DISABLE_AFTER,
                allow_http: self.webhook_allow_http,
                allow_private_networks: self.webhook_allow_private_networks,
                deliver: self.webhook_delivery,
            },
            settlement: SettlementSettings {
                chains: with_fee_caps(
                    with_finality(
                        with_deposit_factories(
                            parse_chains(self.chains.as_deref().unwrap_or(""))?,
                            self.deposit_factories.as_deref().unwrap_or(""),
                        )?,
                        self.chain_finality.as_deref().unwrap_or(""),
                    )?,
                    self.relayer_max_fee_gwei.as_deref().unwrap_or(""),
                )?,
                confirmations: self.chain_confirmations.max(1),
                max_lag_blocks: self.chain_max_lag_blocks,
                poll_interval: Duration::from_millis(self.chain_poll_interval_ms.max(10)),
                relayer_private_key: self.relayer_private_key.clone(),
                replace_after_blocks: self.relayer_replace_after_blocks.max(1),
                low_balance_sends: self.relayer_low_balance_sends,
                relayer_batch: self.relayer_batch.clamp(1, 10_000),
                underpayment_tolerance_bps: match self.deposit_underpayment_tolerance_bps {
                    bps @ 0..=9_999 => bps,
                    bps => {
                        bail!("DEPOSIT_UNDERPAYMENT_TOLERANCE_BPS must be below 10000, got {bps}")
                    }
                },
                erc6492_factories: parse_addresses(
                    "X402_ERC6492_FACTORIES",
                    self.x402_erc6492_factories.as_deref().unwrap_or(""),
                )?,
            },
        })
    }
}

/// A comma-separated list of addresses (blank: none), each `0x` + 40 hex digits.
fn parse_addresses(setting: &str, raw: &str) -> anyhow::Result<Vec<alloy::primitives::Address>> {
    raw.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.parse()
                .with_context(|| format!("{setting}: {item:?} is not an address"))
        })
        .collect()
}

/// `PUBLIC_BASE_URL`: an absolute http(s) URL without query or fragment, kept without its
/// trailing slash so paths are appended to it.
pub fn parse_public_base_url(raw: &str) -> anyhow::Result<String> {
    let url = url::Url::parse(raw).with_context(|| format!("PUBLIC_BASE_URL {raw:?}"))?;
    if !matches!(url.scheme(), "http" | "https")
        || url.query().is_some()
        || url.fragment().is_some()
    {
        bail!(
            "PUBLIC_BASE_URL must be http(s)://host[:port][/path], without query or fragment; got {raw:?}"
        );
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// Parses `token=merchant_id[,token=merchant_id...]`; blanks around entries are ignored.
pub fn parse_bootstrap_api_keys(spec: &str) -> anyhow::Result<Vec<(String, String)>> {
    spec.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| match entry.split_once('=') {
            Some((token, merchant)) if !token.trim().is_empty() && !merchant.trim().is_empty() => {
                Ok((token.trim().to_owned(), merchant.trim().to_owned()))
            }
            // Never echo the entry: it holds a secret token.
            _ => bail!("BOOTSTRAP_API_KEYS entries must look like token=merchant_id"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_pause_of_a_second_or_more_is_refused_at_start() {
        let settings = |pause: &str| {
            let cli = Cli::try_parse_from([
                "payments-api",
                "serve",
                "--database-url",
                "postgres://localhost/payments",
                "--merchant-refusal-pause-ms",
                pause,
            ])
            .expect("the arguments parse");
            let Some(Command::Serve(args)) = cli.command else {
                panic!("serve")
            };
            args.settings().map(|s| s.merchant_limits.refusal_pause)
        };
        assert_eq!(settings("999").unwrap(), Duration::from_millis(999));
        let refused = settings("1000").unwrap_err().to_string();
        assert!(refused.contains("MERCHANT_REFUSAL_PAUSE_MS"), "{refused}");
    }

    #[test]
    fn bind_addresses_may_name_a_host() {
        assert_eq!(
            resolve_bind_addr("localhost:8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert_eq!(
            resolve_bind_addr("0.0.0.0:8080").unwrap(),
            "0.0.0.0:8080".parse().unwrap()
        );
        assert!(
            resolve_bind_addr("localhost").is_err(),
            "a port is required"
        );
    }

    #[test]
    fn chains_parse_ids_and_urls() {
        let chains =
            parse_chains("evm:31337=http://127.0.0.1:8545, evm:1=https://rpc.example").unwrap();
        assert_eq!(chains[0].name, "evm:31337");
        assert_eq!(chains[0].id, 31337);
        assert_eq!(chains[1].rpc_url.as_str(), "https://rpc.example/");
        let several = parse_chains(
            "evm:8453=https://a.example,https://b.example/key, evm:1=https://c.example",
        )
        .unwrap();
        assert_eq!(several.len(), 2);
        assert_eq!(several[0].rpc_urls.len(), 2);
        assert_eq!(several[0].rpc_urls[1].as_str(), "https://b.example/key");
        assert_eq!(several[1].rpc_urls.len(), 1);
        for bad in [
            "https://a.example,evm:1=https://c.example",
            "evm:1=https://a.example,https://a.example",
            "evm:1=https://a.example,ftp://b.example",
            "evm:0=http://x",
            "evm:01=http://x",
            "31337=http://x",
            "evm:1",
            "evm:1=ftp://x",
            "evm:1=http://a,evm:1=http://b",
        ] {
            assert!(parse_chains(bad).is_err(), "{bad}");
        }
        assert!(parse_chains("").unwrap().is_empty());
    }

    #[test]
    fn deposit_factories_belong_to_served_chains() {
        let chains = || parse_chains("evm:31337=http://127.0.0.1:8545, evm:1=https://x").unwrap();
        let factory = "0x0116686E2291dbd5e317F47faDBFb43B599786Ef";
        let with = with_deposit_factories(chains(), &format!("evm:31337={factory}")).unwrap();
        assert_eq!(with[0].deposit_factory, Some(factory.parse().unwrap()));
        assert_eq!(with[1].deposit_factory, None);
        for bad in [
            format!("evm:5={factory}"),
            "evm:31337=0x1234".to_owned(),
            factory.to_owned(),
        ] {
            assert!(with_deposit_factories(chains(), &bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn finality_is_a_count_or_a_tag_per_served_chain() {
        assert_eq!(Finality::parse("12"), Ok(Finality::Confirmations(12)));
        assert_eq!(Finality::parse(" finalized"), Ok(Finality::Finalized));
        assert_eq!(Finality::parse("safe"), Ok(Finality::Safe));
        for bad in ["0", "-1", "latest", "", "12 blocks"] {
            assert!(Finality::parse(bad).is_err(), "{bad}");
        }
        let chains = || parse_chains("evm:31337=http://127.0.0.1:8545, evm:1=https://x").unwrap();
        let with = with_finality(chains(), "evm:1=finalized").unwrap();
        assert_eq!(with[0].finality, None);
        assert_eq!(with[1].finality, Some(Finality::Finalized));
        for bad in ["evm:5=safe", "evm:1=latest", "evm:1"] {
            assert!(with_finality(chains(), bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fee_caps_are_gwei_per_served_chain() {
        let chains =
            || parse_chains("evm:31337=http://127.0.0.1:8545, evm:8453=https://x").unwrap();
        let with = with_fee_caps(chains(), "evm:8453=0.05, evm:31337=30").unwrap();
        assert_eq!(with[0].max_fee_per_gas, Some(30_000_000_000));
        assert_eq!(with[1].max_fee_per_gas, Some(50_000_000));
        for bad in [
            "evm:5=1",
            "evm:8453=0",
            "evm:8453=-1",
            "evm:8453=lots",
            "evm:8453",
        ] {
            assert!(with_fee_caps(chains(), bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bootstrap_keys_parse_pairs_and_skip_blanks() {
        let keys =
            parse_bootstrap_api_keys("merchant-demo=merchant_demo, merchant-other=merchant_other,")
                .unwrap();
        assert_eq!(
            keys,
            vec![
                ("merchant-demo".to_owned(), "merchant_demo".to_owned()),
                ("merchant-other".to_owned(), "merchant_other".to_owned())
            ]
        );
        assert!(parse_bootstrap_api_keys("no-equals-sign").is_err());
        assert!(parse_bootstrap_api_keys("=merchant").is_err());
    }
}
