//! The dashboard's payments list with a million intents of one merchant: the pages a person opens
//! most (the newest, a state, a search by payer, by intent id and by Idempotency-Key, a later
//! page), each answered from an index (`docs/dashboard.md`). The intents are copied in SQL from
//! one the API made; the person's session is written straight into its table, as sign-in would.

use std::{path::Path, sync::Arc, time::Duration};

use sha2::{Digest, Sha256};
use sqlx::{Connection as _, PgConnection};

use super::{ApiProcess, HttpConnection, Op, Workload, empty_database, run};

/// The session cookie every request carries.
pub const SESSION: &str = "bench-dashboard-session";

pub async fn run_list(
    api_bin: &Path,
    server: &str,
    api_env: &[(String, String)],
    intents: u64,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Workload> {
    let database_url = empty_database(server, "payments_bench_dashboard").await?;
    let api = ApiProcess::start(api_bin, &database_url, api_env).await?;
    let mut seeder = HttpConnection::open(api.addr).await?;
    anyhow::ensure!(
        seeder.post(Some("bench-dashboard-template")).await? == 201,
        "the template intent"
    );
    let mut db = PgConnection::connect(&database_url).await?;
    let (template, merchant): (String, String) =
        sqlx::query_as("SELECT id, merchant_id FROM payment_intents ORDER BY created_at LIMIT 1")
            .fetch_one(&mut db)
            .await?;
    eprintln!("loadgen: {intents} intents for the dashboard");
    // A payer per thousand intents, one in ten canceled, one in a thousand failed; a second apart.
    let batch = 100_000;
    for start in (1..intents).step_by(batch as usize) {
        let end = (start + batch).min(intents);
        sqlx::query(
            "INSERT INTO payment_intents (merchant_id, id, state, version, amount, chain, token, payer, payee,
                                          expires_at, created_at, updated_at, metadata, chain_nonce,
                                          client_secret, payment_method, failure_reason)
             SELECT t.merchant_id, 'pi_' || lpad(to_hex(i), 24, '0'),
                    CASE WHEN i % 1000 = 0 THEN 'failed' WHEN i % 10 = 0 THEN 'canceled' ELSE 'created' END,
                    1, t.amount, t.chain, t.token,
                    '0x' || lpad(to_hex(i % 1000 + 1), 40, '0'), t.payee, t.expires_at,
                    t.created_at - make_interval(secs => i), t.created_at - make_interval(secs => i),
                    t.metadata, sha256(convert_to('bench' || i, 'UTF8')),
                    'pi_bench_secret_' || i, 'authorization',
                    CASE WHEN i % 1000 = 0 THEN 'authorization_expired' END
               FROM payment_intents t, generate_series($1::bigint, $2::bigint - 1) AS i
              WHERE t.id = $3",
        )
        .bind(start as i64)
        .bind(end as i64)
        .bind(&template)
        .execute(&mut db)
        .await?;
    }
    sqlx::query("ANALYZE payment_intents")
        .execute(&mut db)
        .await?;
    sqlx::query(
        "INSERT INTO dashboard_users (id, merchant_id, email, role)
         VALUES ('usr_000000000000000000000001', $1, 'bench@example.com', 'viewer')",
    )
    .bind(&merchant)
    .execute(&mut db)
    .await?;
    sqlx::query(
        "INSERT INTO dashboard_sessions (id_sha256, user_id, csrf_token)
         VALUES ($1, 'usr_000000000000000000000001', 'bench')",
    )
    .bind(Sha256::digest(SESSION.as_bytes()).to_vec())
    .execute(&mut db)
    .await?;
    let middle = format!("pi_{:024x}", intents / 2);
    let payer = format!("0x{:040x}", 7);
    let paths: Vec<String> = vec![
        "/dashboard/payments".to_owned(),
        "/dashboard/payments?state=canceled".to_owned(),
        "/dashboard/payments?state=failed".to_owned(),
        format!("/dashboard/payments?q={payer}"),
        format!("/dashboard/payments?q={middle}"),
        "/dashboard/payments?q=bench-dashboard-template".to_owned(),
        format!("/dashboard/payments?after={middle}"),
    ];
    for path in &paths {
        let page = seeder.get_dashboard(path).await?;
        anyhow::ensure!(
            page.contains("<h1>Payments</h1>"),
            "{path} did not answer the payments page: {}",
            page.chars().take(300).collect::<String>()
        );
    }
    let workload = run(
        &api,
        "dashboard payments list, 1 000 000 intents",
        clients,
        duration,
        Op::Dashboard(Arc::new(paths)),
    )
    .await;
    drop(api);
    Ok(workload)
}
