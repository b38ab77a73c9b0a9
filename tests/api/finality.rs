//! Finality as a policy per chain (`CHAIN_FINALITY`): a chain whose node names its own finalized
//! head settles at that head, not after a count of confirmations.

use payments_api::rails::finality::Finality;

use crate::helpers::{
    SEED_BODY,
    chain::{Anvil, PAYEE, PAYER_KEY, app_on_with},
};

const AMOUNT: u128 = 100_000_000;

/// Anvil with 4 slots an epoch names as finalized the block 8 below its head. Two payments in
/// consecutive blocks, with `CHAIN_CONFIRMATIONS=1` beside `finalized`: the first settles when
/// its block is finalized and the second, one block newer, in the same round does not; it
/// settles when the next block finalizes it. `reconcile`, told the same finality, agrees.
#[tokio::test]
async fn a_payment_settles_when_the_chain_finalizes_its_block_and_not_before() {
    let anvil = Anvil::start_with(&["--slots-in-an-epoch", "4"]).await;
    let app = app_on_with(&anvil, 1, false, |s| {
        s.settlement.chains[0].finality = Some(Finality::Finalized);
    })
    .await;
    let before = anvil.balance(PAYEE);
    let mut paid = Vec::new();
    for _ in 0..2 {
        let id = app.create_intent_id(SEED_BODY).await;
        let typed = app.typed_data(&id).await;
        paid.push((id, typed));
    }
    // Automine: each payment is its own block, the second right after the first.
    for (_, typed) in &paid {
        anvil.submit_as_payer(typed, &anvil.sign(PAYER_KEY, typed));
    }
    let second_block = anvil.block_number().await;
    let (first, second) = (&paid[0].0, &paid[1].0);
    // The head 8 above the first payment's block: that block is finalized, the second's is not.
    anvil.mine(7).await;
    app.wait_for_state(first, "succeeded").await;
    // Applied in the same round as the first (everything at or below the done block is): the
    // second was seen and waits.
    let seen = format!("EXISTS (SELECT 1 FROM chain_observations WHERE subject = '{second}')");
    app.wait_until("the second payment was seen", &seen).await;
    assert_eq!(
        app.state_of(second).await,
        "created",
        "not before its block is finalized"
    );
    let done: i64 = sqlx::query_scalar(
        "SELECT max(block_number) FROM chain_observations WHERE applied_at IS NOT NULL",
    )
    .fetch_one(&app.db)
    .await
    .unwrap_or_default();
    assert!(done < second_block as i64);

    anvil.mine(1).await;
    app.wait_for_state(second, "succeeded").await;
    assert_eq!(anvil.balance(PAYEE) - before, 2 * AMOUNT);
    for (id, _) in &paid {
        assert_eq!(
            app.event_types(id).await,
            ["payment_intent.created", "payment_intent.succeeded"]
        );
    }
    let reconciled = std::process::Command::new(env!("CARGO_BIN_EXE_payments-api"))
        .args(["reconcile", "--chain", "evm:31337"])
        .env("CHAINS", format!("evm:31337={}", anvil.url))
        .env("CHAIN_CONFIRMATIONS", "1")
        .env("CHAIN_FINALITY", "evm:31337=finalized")
        .env("DATABASE_URL", &app.database_url)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&reconciled.stdout);
    assert!(reconciled.status.success(), "{said}");
    // The head is 8 above the second payment's block: reconciled up to that block, not the head.
    assert!(
        said.contains(&format!("2 paid on chain up to block {second_block}")),
        "{said}"
    );
}
