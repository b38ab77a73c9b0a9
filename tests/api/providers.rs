//! Hosted RPC providers as they misbehave, between the app and anvil: a JSON-RPC proxy
//! (`helpers::rpc_fault`) that answers as the large providers do.

use crate::helpers::chain::Anvil;
use crate::{
    helpers::{
        RpcFaultProxy, SEED_BODY, TestApp,
        chain::{PAYEE, PAYER_KEY, app_on_with},
    },
    settlement::reconcile,
};

const AMOUNT: u128 = 100_000_000;
/// The address of the relayer's key (anvil's fourth account).
const RELAYER: &str = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";

/// A provider that refuses any `eth_getLogs` over 16 blocks, in each large provider's words in
/// turn and as HTTP 413: the follower halves its range until it is served and keeps that range, and
/// every payment in the 300 blocks it caught up on settles once. None is skipped, none is read
/// twice into the ledger, and `reconcile` agrees with the chain.
#[tokio::test]
async fn a_provider_refusing_wide_log_ranges_is_read_in_narrower_ones_and_nothing_is_skipped() {
    let anvil = Anvil::start().await;
    let proxy = RpcFaultProxy::start(&anvil.url).await;
    let through_proxy: url::Url = proxy.url.parse().unwrap();
    let app = app_on_with(&anvil, 1, false, move |s| {
        s.settlement.chains[0].rpc_url = through_proxy;
    })
    .await;
    app.wait_for_listener(&anvil).await;
    proxy.cap_log_ranges(16);
    let before = anvil.balance(PAYEE);
    let mut paid = Vec::new();
    for _ in 0..3 {
        let id = app.create_intent_id(SEED_BODY).await;
        let typed = app.typed_data(&id).await;
        paid.push((id, typed));
    }
    // Each payment followed by 100 blocks, hidden from the follower until all are mined: it is
    // then 300 blocks behind.
    proxy.lag_by(u64::MAX);
    for (_, typed) in &paid {
        anvil.submit_as_payer(typed, &anvil.sign(PAYER_KEY, typed));
        anvil.mine(100).await;
    }
    proxy.lag_by(0);
    for (id, _) in &paid {
        app.wait_for_state(id, "succeeded").await;
        assert_eq!(
            app.event_types(id).await,
            ["payment_intent.created", "payment_intent.succeeded"]
        );
    }
    app.wait_for_listener(&anvil).await;
    assert_eq!(anvil.balance(PAYEE) - before, 3 * AMOUNT);
    booked_once_each(&app, &anvil, 3).await;
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
    let app = app_through(&anvil, &[&behind, &other], 1).await;
    pay(&app, &anvil).await;
    assert_eq!(
        behind.served("eth_getLogs"),
        0,
        "no logs were read from the endpoint behind"
    );
    assert!(other.served("eth_getLogs") > 0);
    assert!(
        behind.served_total() > behind.served("eth_sendRawTransaction"),
        "the endpoint behind was still asked for its head"
    );
    assert!(
        behind.served("eth_sendRawTransaction") >= 1 && other.served("eth_sendRawTransaction") >= 1,
        "the transaction went to both"
    );

    behind.lag_by(0);
    other.set_down(true);
    pay(&app, &anvil).await;

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
    pay(&app, &anvil).await;

    other.set_stalled(true);
    pay(&app, &anvil).await;
}

/// The app on `anvil` through `endpoints` (in that order) with `confirmations`, relaying.
async fn app_through(anvil: &Anvil, endpoints: &[&RpcFaultProxy], confirmations: u64) -> TestApp {
    let urls: Vec<url::Url> = endpoints.iter().map(|e| e.url.parse().unwrap()).collect();
    app_on_with(anvil, confirmations, true, move |s| {
        s.settlement.chains[0].rpc_urls = urls;
    })
    .await
}

/// An intent created, confirmed by the payer's signature and awaited until it succeeds.
async fn pay(app: &TestApp, anvil: &Anvil) -> String {
    let id = app.create_intent_id(SEED_BODY).await;
    let signature = anvil.sign(PAYER_KEY, &app.typed_data(&id).await);
    let answer = app.confirm(&id, &signature).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    app.wait_for_state(&id, "succeeded").await;
    id
}

/// Each of `payments` booked once, and `reconcile` agreeing with the chain.
async fn booked_once_each(app: &TestApp, anvil: &Anvil, payments: i64) {
    let entries: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_entries")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(entries, payments, "each payment booked once");
    let (agrees, output) = reconcile(app, anvil);
    assert!(agrees, "{output}");
}

/// Awaits `condition`, looking every 20 ms; panics after 30 s.
async fn until(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// One endpoint answers 429 with `Retry-After: 12`: it is asked nothing more for those 12 s (the other
/// answers, a payment settles) and is asked again after. Then every broadcast's answer is lost
/// with its connection, though the node took the transaction: the payment still settles once,
/// from one transaction.
#[tokio::test]
async fn a_throttled_endpoint_rests_for_its_retry_after_and_a_lost_broadcast_answer_pays_once() {
    let anvil = Anvil::start().await;
    let throttled = RpcFaultProxy::start(&anvil.url).await;
    let other = RpcFaultProxy::start(&anvil.url).await;
    let app = app_through(&anvil, &[&throttled, &other], 1).await;
    let before = anvil.balance(PAYEE);
    pay(&app, &anvil).await;

    throttled.throttle_next(12);
    until("the endpoint said 429", || {
        throttled.arrivals().iter().any(|(_, refused)| *refused)
    })
    .await;
    pay(&app, &anvil).await;
    let refused_at = throttled
        .arrivals()
        .into_iter()
        .find(|(_, refused)| *refused)
        .unwrap()
        .0;
    let rest = std::time::Duration::from_secs(12);
    until(
        "the throttled endpoint is asked again after its Retry-After",
        || {
            throttled
                .arrivals()
                .iter()
                .any(|(at, _)| *at > refused_at + rest)
        },
    )
    .await;
    // Calls already on their way when the 429 came arrive just after it; none is sent later
    // within the rest (a failed endpoint's own rest, 10 s, would end within it).
    let in_rest: Vec<_> = throttled
        .arrivals()
        .into_iter()
        .map(|(at, _)| at.saturating_duration_since(refused_at))
        .filter(|after| *after > std::time::Duration::from_secs(1) && *after <= rest)
        .collect();
    assert!(
        in_rest.is_empty(),
        "asked {in_rest:?} after its 429 with Retry-After: 12"
    );

    throttled.reset_answers_to(Some("eth_sendRawTransaction"));
    other.reset_answers_to(Some("eth_sendRawTransaction"));
    let relayer_nonce = anvil.cast(&["nonce", RELAYER, "--rpc-url", &anvil.url]);
    let id = pay(&app, &anvil).await;
    assert_eq!(
        app.event_types(&id).await,
        [
            "payment_intent.created",
            "payment_intent.processing",
            "payment_intent.succeeded"
        ]
    );
    let relayer_sent = anvil
        .cast(&["nonce", RELAYER, "--rpc-url", &anvil.url])
        .parse::<u64>()
        .unwrap()
        - relayer_nonce.parse::<u64>().unwrap();
    assert_eq!(
        relayer_sent, 1,
        "one transaction for the payment whose broadcast answers were lost"
    );
    app.wait_for_listener(&anvil).await;
    assert_eq!(anvil.balance(PAYEE) - before, 3 * AMOUNT);
    booked_once_each(&app, &anvil, 3).await;
}

/// A second node of the chain (an anvil forked from it) serves blocks of its own: a payment that
/// reached only that node is read from it, but the two endpoints name different blocks at the
/// height that would confirm it, so nothing is confirmed while they disagree. The odd node dies:
/// its blocks are dropped as a reorg, the intent was never paid, and paying it through the node
/// left settles it once.
#[tokio::test]
async fn a_block_the_endpoints_disagree_on_is_not_confirmed_and_a_node_dying_loses_nothing() {
    let anvil = Anvil::start().await;
    // The odd one first: reads go to it while the heads agree.
    let odd = RpcFaultProxy::start(&anvil.url).await;
    let good = RpcFaultProxy::start(&anvil.url).await;
    let app = app_through(&anvil, &[&odd, &good], 3).await;
    let before = anvil.balance(PAYEE);
    let first = app.create_intent_id(SEED_BODY).await;
    let signature = anvil.sign(PAYER_KEY, &app.typed_data(&first).await);
    assert_eq!(app.confirm(&first, &signature).await.status, 200);
    app.mine_until(
        &anvil,
        "the first payment settles",
        &format!("(SELECT state = 'succeeded' FROM payment_intents WHERE id = '{first}')"),
    )
    .await;

    let mut fork = anvil.fork().await;
    odd.point_at(&fork.url);
    let id = app.create_intent_id(SEED_BODY).await;
    let typed = app.typed_data(&id).await;
    let signature = anvil.sign(PAYER_KEY, &typed);
    fork.submit_as_payer(&typed, &signature);
    anvil.mine(1).await;
    app.wait_until(
        "the payment on the odd node is observed",
        "EXISTS (SELECT 1 FROM chain_observations WHERE applied_at IS NULL)",
    )
    .await;
    let disagreements = || async {
        let metrics = app.get("/metrics").await.body;
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix("chain_endpoints_disagreements_total{chain=\"evm:31337\"} ")
            })
            .map_or(0.0, |n| n.parse::<f64>().unwrap())
    };
    let held_from = disagreements().await;
    // Both go on: the payment's block is deep enough to confirm, had they agreed. Awaited: the
    // follower holding on their disagreement, or the payment settling, whichever comes first.
    for _ in 0..8 {
        fork.mine(1).await;
        anvil.mine(1).await;
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while disagreements().await < held_from + 3.0 && app.state_of(&id).await == "created" {
        assert!(tokio::time::Instant::now() < deadline, "timed out");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        app.state_of(&id).await,
        "created",
        "a payment only the odd node has is not confirmed"
    );

    fork.kill();
    app.wait_until(
        "the odd node's blocks are dropped",
        "NOT EXISTS (SELECT 1 FROM chain_observations WHERE applied_at IS NULL)",
    )
    .await;
    assert_eq!(app.state_of(&id).await, "created");
    let answer = app.confirm(&id, &signature).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    app.mine_until(
        &anvil,
        "the payment settles",
        &format!("(SELECT state = 'succeeded' FROM payment_intents WHERE id = '{id}')"),
    )
    .await;
    assert_eq!(
        app.event_types(&id).await,
        [
            "payment_intent.created",
            "payment_intent.processing",
            "payment_intent.succeeded"
        ]
    );
    assert_eq!(anvil.balance(PAYEE) - before, 2 * AMOUNT);
    booked_once_each(&app, &anvil, 2).await;
}
