//! Hosted RPC providers as they misbehave, between the app and anvil: a JSON-RPC proxy
//! (`helpers::rpc_fault`) that answers as the large providers do.

use crate::helpers::chain::Anvil;
use crate::{
    helpers::{
        RpcFaultProxy, SEED_BODY,
        chain::{PAYEE, PAYER_KEY, app_on_with},
    },
    settlement::reconcile,
};

const AMOUNT: u128 = 100_000_000;

/// A provider that refuses any `eth_getLogs` over 16 blocks, in each large provider's words in
/// turn and as HTTP 413: the follower halves its range until it is served and grows it back, and
/// every payment in the 300 blocks it caught up on settles once. None is skipped, none is read
/// twice into the ledger, and `reconcile` agrees with the chain.
#[tokio::test]
async fn a_provider_refusing_wide_log_ranges_is_read_in_narrower_ones_and_nothing_is_skipped() {
    let anvil = Anvil::start().await;
    let proxy = RpcFaultProxy::start(&anvil.url).await;
    proxy.cap_log_ranges(16);
    let through_proxy: url::Url = proxy.url.parse().unwrap();
    let app = app_on_with(&anvil, 1, false, move |s| {
        s.settlement.chains[0].rpc_url = through_proxy;
    })
    .await;
    app.wait_for_listener(&anvil).await;
    let before = anvil.balance(PAYEE);
    let mut paid = Vec::new();
    for _ in 0..3 {
        let id = app.create_intent_id(SEED_BODY).await;
        let typed = app.typed_data(&id).await;
        paid.push((id, typed));
    }
    // Each payment followed by 100 blocks at once: the follower is far behind every time.
    for (_, typed) in &paid {
        anvil.submit_as_payer(typed, &anvil.sign(PAYER_KEY, typed));
        anvil.mine(100).await;
    }
    for (id, _) in &paid {
        app.wait_for_state(id, "succeeded").await;
        assert_eq!(
            app.event_types(id).await,
            ["payment_intent.created", "payment_intent.succeeded"]
        );
    }
    app.wait_for_listener(&anvil).await;
    assert_eq!(anvil.balance(PAYEE) - before, 3 * AMOUNT);
    let entries: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entries")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(entries, 3, "each payment booked once");
    assert!(
        proxy.range_refusals() >= 5,
        "every wording and the 413 were met ({} refusals)",
        proxy.range_refusals()
    );
    assert!(
        proxy.widest_range_served() <= 16,
        "no range above the cap was read ({} blocks)",
        proxy.widest_range_served()
    );
    let (agrees, output) = reconcile(&app, &anvil);
    assert!(agrees, "{output}");
}

/// A chain behind two endpoints (two proxies in front of one node). One says a head 20 blocks
/// behind: reads move to the other, and no range of logs goes to the one behind. The other goes
/// down: everything fails over, and a payment settles. Both down: `/readyz` says the chain has no
/// endpoint; back up, a payment settles. One stalls past the calls' timeout: the other answers.
/// Transactions go to every endpoint up.
#[tokio::test]
async fn a_chain_behind_two_endpoints_is_read_from_one_that_is_up_and_not_behind() {
    let anvil = Anvil::start().await;
    let behind = RpcFaultProxy::start(&anvil.url).await;
    let other = RpcFaultProxy::start(&anvil.url).await;
    behind.lag_by(20);
    let urls: Vec<url::Url> = [&behind.url, &other.url]
        .iter()
        .map(|u| u.parse().unwrap())
        .collect();
    let app = app_on_with(&anvil, 1, true, move |s| {
        s.settlement.chains[0].rpc_urls = urls;
    })
    .await;
    let pay = || async {
        let id = app.create_intent_id(SEED_BODY).await;
        let signature = anvil.sign(PAYER_KEY, &app.typed_data(&id).await);
        let answer = app.confirm(&id, &signature).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        app.wait_for_state(&id, "succeeded").await;
        id
    };
    pay().await;
    assert_eq!(
        behind.served("eth_getLogs"),
        0,
        "no logs were read from the endpoint behind"
    );
    assert!(other.served("eth_getLogs") > 0);
    assert!(
        behind.served("eth_sendRawTransaction") >= 1 && other.served("eth_sendRawTransaction") >= 1,
        "the transaction went to both"
    );

    behind.lag_by(0);
    other.set_down(true);
    pay().await;

    behind.set_down(true);
    // Each call of the follower's next round fails on both: the chain is then said degraded.
    let said = |body: String| body.contains("evm:31337: no RPC endpoint answers");
    let mut degraded = false;
    for _ in 0..200 {
        if said(app.get("/readyz").await.body) {
            degraded = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(degraded, "{}", app.get("/readyz").await.body);
    behind.set_down(false);
    other.set_down(false);
    pay().await;

    other.set_stalled(true);
    pay().await;
}
