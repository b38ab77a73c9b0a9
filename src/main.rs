use std::process::ExitCode;

use clap::Parser;
use payments_api::{
    audit::Who,
    auth,
    config::{ApiKeysCommand, Cli, Command, LimitsCommand, LogFormat, UsersCommand},
    db,
    startup::Application,
    telemetry,
};

/// mimalloc: per-thread free lists without the system allocator's consolidation, which took a
/// tenth of a request's CPU (`docs/bench/history.md`, "Where a request's CPU goes").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An error ends the process with its message and causes on one line, never a backtrace: what
/// an operator needs is what is wrong and how to fix it (`RUST_BACKTRACE` is for panics).
fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        None => serve(cli.serve).await,
        Some(Command::Serve(args)) => serve(*args).await,
        Some(Command::Migrate(database)) => {
            let _logs = telemetry::init(LogFormat::Pretty);
            db::migrate(database.url()?).await?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Some(Command::Devnet { rpc_url }) => {
            let devnet = payments_api::rails::evm::devnet::set_up(&rpc_url).await?;
            let what = if devnet.deployed_now {
                "deployed"
            } else {
                "already deployed"
            };
            println!(
                "devnet token {what} at {}, USDC at {}, deposit factory at {}, Permit2 at {}, a token like Tether's at {}, on {rpc_url}",
                devnet.token,
                devnet.usdc,
                devnet.deposit_factory,
                payments_api::rails::evm::permit2::PERMIT2,
                payments_api::rails::evm::devnet::usdt_like()
            );
            Ok(())
        }
        Some(Command::Reconcile {
            chain,
            chains,
            confirmations,
            chain_finality,
            database,
        }) => {
            let _logs = telemetry::init(LogFormat::Pretty);
            let chains = payments_api::config::parse_chains(&chains)?;
            let endpoint = payments_api::config::with_finality(
                chains,
                chain_finality.as_deref().unwrap_or(""),
            )?
            .into_iter()
            .find(|c| c.name == chain)
            .ok_or_else(|| anyhow::anyhow!("CHAINS does not name {chain}"))?;
            let finality =
                endpoint
                    .finality
                    .unwrap_or(payments_api::config::Finality::Confirmations(
                        confirmations.max(1),
                    ));
            let node = payments_api::rails::rpc::connect(&endpoint.rpc_url);
            let pool = db::pool(database.url()?, 1)?;
            let mut conn = pool.acquire().await?;
            let report =
                payments_api::reconcile::reconcile(&mut conn, &endpoint, &node, finality).await?;
            println!(
                "{chain}: {} payments booked, {} paid on chain up to block {}, {} refunds booked, {} refunded on chain, {} other transfers to or from merchant addresses, {} deposit-address transfers booked, {} on chain",
                report.booked,
                report.paid_on_chain,
                report.up_to_block,
                report.refunds_booked,
                report.refunded_on_chain,
                report.unrelated_transfers,
                report.deposit_transfers_booked,
                report.deposit_transfers_on_chain
            );
            for burned in &report.burned_nonces {
                println!("BURNED {burned}");
            }
            for difference in &report.differences {
                println!("DIFFERENCE {difference}");
            }
            if !report.differences.is_empty() {
                std::process::exit(1);
            }
            Ok(())
        }
        Some(Command::Openapi) => {
            print!("{}", payments_api::http::openapi::document());
            Ok(())
        }
        Some(Command::ApiKeys(command)) => api_keys(command).await,
        Some(Command::Limits(command)) => limits(command).await,
        Some(Command::Users(command)) => users(command).await,
    }
}

/// `payments-api users …`: the people of a merchant's dashboard (`docs/dashboard.md`).
async fn users(command: UsersCommand) -> anyhow::Result<()> {
    use payments_api::dashboard::people::{self, Email, Role};
    match command {
        UsersCommand::Create {
            merchant,
            email,
            role,
            public_base_url,
            database,
        } => {
            let merchant = auth::MerchantId::parse(&merchant)?;
            let email = Email::parse(&email).map_err(|why| anyhow::anyhow!("--email {why}"))?;
            let role = Role::parse(&role)
                .ok_or_else(|| anyhow::anyhow!("--role must be owner, developer or viewer"))?;
            let base = payments_api::config::parse_public_base_url(&public_base_url)?;
            let pool = db::pool(database.url()?, 1)?;
            let mut tx = payments_api::db::OpenTransaction::begin_on_pool(&pool).await?;
            let (_, token) =
                people::invite(&mut tx, merchant.as_str(), &email, role, &Who::cli()).await?;
            tx.commit()
                .await
                .map_err(payments_api::error::ApiError::from)?;
            let base = payments_api::intents::routes::PublicBaseUrl::new(&base);
            println!(
                "{}",
                payments_api::dashboard::routes::password_link(&base, &token)
            );
        }
    }
    Ok(())
}

/// `payments-api limits …`: a merchant's own limits (`docs/design.md`, "Per-merchant limits").
async fn limits(command: LimitsCommand) -> anyhow::Result<()> {
    use payments_api::tenants::{OwnLimits, registry};
    let print = |merchant: &auth::MerchantId, own: OwnLimits| {
        let shown = |limit: Option<u32>| match limit {
            None => "default".to_owned(),
            Some(0) => "unlimited".to_owned(),
            Some(limit) => limit.to_string(),
        };
        println!(
            "{}\trate {}/s\tconcurrency {}",
            merchant.as_str(),
            shown(own.rate_per_second),
            shown(own.concurrency)
        );
    };
    match command {
        LimitsCommand::Set {
            merchant,
            rate,
            concurrency,
            database,
        } => {
            let merchant = auth::MerchantId::parse(&merchant)?;
            let pool = db::pool(database.url()?, 1)?;
            let own = OwnLimits {
                rate_per_second: rate,
                concurrency,
            };
            registry::set(&pool, &merchant, own, &Who::cli()).await?;
            print(&merchant, own);
        }
        LimitsCommand::Show { merchant, database } => {
            let merchant = auth::MerchantId::parse(&merchant)?;
            let pool = db::pool(database.url()?, 1)?;
            print(&merchant, registry::show(&pool, &merchant).await?);
        }
    }
    Ok(())
}

/// `payments-api api-keys …`: keys a merchant controls (`docs/api.md`, "Authentication").
async fn api_keys(command: ApiKeysCommand) -> anyhow::Result<()> {
    let when = |at: Option<time::OffsetDateTime>| {
        at.and_then(|at| {
            at.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "-".to_owned())
    };
    match command {
        ApiKeysCommand::Create { merchant, database } => {
            let merchant = auth::MerchantId::parse(&merchant)?;
            let pool = db::pool(database.url()?, 1)?;
            println!("{}", auth::create(&pool, &merchant, &Who::cli()).await?);
        }
        ApiKeysCommand::List { merchant, database } => {
            let merchant = auth::MerchantId::parse(&merchant)?;
            let pool = db::pool(database.url()?, 1)?;
            println!("prefix\tcreated\tlast_used\texpires\trevoked");
            for key in auth::list(&pool, &merchant).await? {
                println!(
                    "{}\t{}\t{}\t{}\t{}",
                    key.prefix.as_deref().unwrap_or("(no prefix)"),
                    when(Some(key.created_at)),
                    when(key.last_used_at),
                    when(key.expires_at),
                    when(key.revoked_at),
                );
            }
        }
        ApiKeysCommand::Revoke { prefix, database } => {
            let pool = db::pool(database.url()?, 1)?;
            auth::revoke(&pool, None, &prefix, &Who::cli()).await?;
            println!("revoked {prefix}");
        }
        ApiKeysCommand::Rotate {
            merchant,
            old_expires_in,
            database,
        } => {
            let merchant = auth::MerchantId::parse(&merchant)?;
            let pool = db::pool(database.url()?, 1)?;
            let overlap = std::time::Duration::from_secs(old_expires_in);
            println!(
                "{}",
                auth::rotate(&pool, &merchant, overlap, &Who::cli()).await?
            );
        }
    }
    Ok(())
}

async fn serve(args: payments_api::config::ServeArgs) -> anyhow::Result<()> {
    let _logs = telemetry::init(args.log_format);
    let settings = args.settings()?;
    if args.migrate {
        db::migrate(&settings.database_url).await?;
    }
    Application::build(&settings)
        .await?
        .run_until_stopped()
        .await
}
