//! payments-api as an x402 facilitator (`docs/x402.md`): `/x402/supported`, and `/x402/verify`
//! answering each bad payment with the reference facilitator's `invalidReason`. Payments are
//! EIP-3009 authorizations signed by cast over the domain the requirements name.

use serde_json::{Value, json};

use crate::helpers::{
    DEMO_MERCHANT, DEMO_TOKEN, OTHER_TOKEN, TestApp,
    chain::{
        Anvil, PAYEE, PAYEE_KEY, PAYER, PAYER_KEY, RELAYER_KEY, TOKEN, USDC, app_on, app_on_with,
        chain_time,
    },
};

/// Another replica on `app`'s database, with the relayer.
async fn relaying_replica(anvil: &Anvil, app: &TestApp) -> TestApp {
    let settlement = anvil.settlement(1);
    TestApp::spawn_on(&app.database_url, move |s| {
        s.settlement = settlement;
        s.settlement.relayer_private_key = Some(RELAYER_KEY.to_owned());
    })
    .await
}

/// A payment's parts, each changeable to make it bad.
struct Payment {
    token: &'static str,
    name: &'static str,
    version: &'static str,
    to: &'static str,
    value: &'static str,
    valid_after: u64,
    valid_before: u64,
    nonce: String,
    signer: &'static str,
    /// The authorizer: the payer, or a contract wallet its key signs for.
    from: String,
}

impl Payment {
    async fn new(anvil: &Anvil, token: &'static str) -> Self {
        let now = chain_time(anvil).await;
        let (name, version) = if token == USDC {
            ("USD Coin", "2")
        } else {
            ("Devnet USD", "1")
        };
        Self {
            token,
            name,
            version,
            to: PAYEE,
            value: "1000000",
            valid_after: now - 600,
            valid_before: now + 600,
            nonce: format!("0x{}", hex_of(rand_bytes())),
            signer: PAYER_KEY,
            from: PAYER.to_owned(),
        }
    }

    /// The `{x402Version, paymentPayload, paymentRequirements}` body, signed by cast.
    fn request(&self, anvil: &Anvil, requirements: Value) -> Value {
        let typed = json!({
            "types": {
                "EIP712Domain": [
                    {"name": "name", "type": "string"}, {"name": "version", "type": "string"},
                    {"name": "chainId", "type": "uint256"}, {"name": "verifyingContract", "type": "address"}],
                "TransferWithAuthorization": [
                    {"name": "from", "type": "address"}, {"name": "to", "type": "address"},
                    {"name": "value", "type": "uint256"}, {"name": "validAfter", "type": "uint256"},
                    {"name": "validBefore", "type": "uint256"}, {"name": "nonce", "type": "bytes32"}]
            },
            "primaryType": "TransferWithAuthorization",
            "domain": {"name": self.name, "version": self.version, "chainId": 31337, "verifyingContract": self.token},
            "message": {
                "from": self.from, "to": self.to, "value": self.value,
                "validAfter": self.valid_after.to_string(), "validBefore": self.valid_before.to_string(),
                "nonce": self.nonce
            }
        });
        let signature = anvil.sign(self.signer, &typed);
        json!({
            "x402Version": 2,
            "paymentPayload": {
                "x402Version": 2,
                "accepted": requirements,
                "payload": {"signature": signature, "authorization": typed["message"]}
            },
            "paymentRequirements": requirements,
        })
    }

    fn requirements(&self) -> Value {
        json!({
            "scheme": "exact", "network": "eip155:31337", "amount": "1000000", "asset": self.token,
            "payTo": PAYEE, "maxTimeoutSeconds": 60,
            "extra": {"name": if self.token == USDC { "USD Coin" } else { "Devnet USD" },
                      "version": if self.token == USDC { "2" } else { "1" }}
        })
    }
}

fn rand_bytes() -> [u8; 32] {
    rand::random()
}

fn hex_of(bytes: [u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn verify(app: &TestApp, body: &Value) -> Value {
    let answer = app
        .post_as(DEMO_TOKEN, "/x402/verify", None, &body.to_string())
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()
}

#[tokio::test]
async fn supported_names_each_served_chain_and_the_relayer() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let answer = app.get_as(DEMO_TOKEN, "/x402/supported").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let relayer = anvil.cast(&["wallet", "address", "--private-key", RELAYER_KEY]);
    assert_eq!(
        answer.json(),
        json!({
            "kinds": [
                {"x402Version": 2, "scheme": "exact", "network": "eip155:31337"},
                {"x402Version": 2, "scheme": "upto", "network": "eip155:31337",
                 "extra": {"facilitatorAddress": relayer}},
            ],
            "extensions": ["eip2612GasSponsoring", "payment-identifier"],
            "signers": {"eip155:*": [relayer]},
        })
    );
    assert_eq!(app.get("/x402/supported").await.status, 401);
}

#[tokio::test]
async fn verify_accepts_a_good_payment_in_either_token_and_writes_nothing() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    for token in [TOKEN, USDC] {
        let payment = Payment::new(&anvil, token).await;
        let answer = verify(&app, &payment.request(&anvil, payment.requirements())).await;
        assert_eq!(answer, json!({"isValid": true, "payer": PAYER}), "{token}");
    }
    assert_eq!(app.intent_count().await, 0);
    let keys: i64 = sqlx::query_scalar("SELECT count(*) FROM idempotency_keys")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(keys, 0);
}

#[tokio::test]
async fn verify_names_what_is_wrong_as_the_reference_facilitator_does() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let used = Payment::new(&anvil, TOKEN).await;
    let body = used.request(&anvil, used.requirements());
    let payload = &body["paymentPayload"]["payload"];
    anvil.submit_as_payer(
        &json!({"domain": {"verifyingContract": TOKEN}, "message": payload["authorization"]}),
        payload["signature"].as_str().unwrap(),
    );

    let mut cases: Vec<(&str, Value)> = vec![("invalid_exact_evm_nonce_already_used", body)];
    type Change = fn(&mut Payment);
    type Require = fn(&mut Value);
    let faults: [(&str, Change, Require); 10] = [
        (
            "invalid_exact_evm_signature",
            |p| p.signer = PAYEE_KEY,
            |_| {},
        ),
        (
            "invalid_exact_evm_recipient_mismatch",
            |p| p.to = PAYER,
            |r| r["payTo"] = PAYEE.into(),
        ),
        (
            "invalid_exact_evm_payload_authorization_value_mismatch",
            |p| p.value = "999",
            |_| {},
        ),
        (
            "invalid_exact_evm_payload_authorization_valid_before",
            |p| p.valid_before = 1,
            |_| {},
        ),
        (
            "invalid_exact_evm_payload_authorization_valid_after",
            |p| p.valid_after = u64::MAX / 2,
            |_| {},
        ),
        (
            "invalid_exact_evm_token_name_mismatch",
            |p| p.name = "Devnet Dollar",
            |r| r["extra"]["name"] = "Devnet Dollar".into(),
        ),
        (
            "invalid_exact_evm_token_version_mismatch",
            |p| p.version = "9",
            |r| r["extra"]["version"] = "9".into(),
        ),
        (
            "invalid_exact_evm_missing_eip712_domain",
            |_| {},
            |r| r["extra"] = json!({}),
        ),
        (
            "invalid_exact_evm_scheme",
            |_| {},
            |r| r["scheme"] = "upto".into(),
        ),
        (
            "invalid_network",
            |_| {},
            |r| r["network"] = "eip155:1".into(),
        ),
    ];
    for (reason, change, requirements) in faults {
        let mut payment = Payment::new(&anvil, TOKEN).await;
        change(&mut payment);
        let mut required = payment.requirements();
        requirements(&mut required);
        cases.push((reason, payment.request(&anvil, required)));
    }
    for (reason, body) in cases {
        let answer = verify(&app, &body).await;
        assert_eq!(answer["isValid"], false, "{reason}: {answer}");
        assert_eq!(answer["invalidReason"], reason, "{answer}");
        assert_eq!(answer["payer"], PAYER, "{reason}");
    }
}

async fn settle(app: &TestApp, key: Option<&str>, body: &Value) -> crate::helpers::Answer {
    let answer = app
        .post_as(DEMO_TOKEN, "/x402/settle", key, &body.to_string())
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer
}

/// The transfers of `value` from the payer to the payee in the transaction `hash`.
async fn transfers_in(anvil: &Anvil, hash: &str) -> Vec<(String, String, u128)> {
    let receipt = anvil.rpc("eth_getTransactionReceipt", json!([hash])).await;
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    let transfer = anvil.cast(&["keccak", "Transfer(address,address,uint256)"]);
    receipt["logs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|log| log["topics"][0] == transfer.as_str())
        .map(|log| {
            let topic = |i: usize| {
                let t = log["topics"][i].as_str().unwrap();
                format!("0x{}", &t[26..])
            };
            let value =
                u128::from_str_radix(log["data"].as_str().unwrap().trim_start_matches("0x"), 16)
                    .unwrap();
            (topic(1), topic(2), value)
        })
        .collect()
}

#[tokio::test]
async fn settle_pays_once_and_answers_success_once() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    for token in [TOKEN, USDC] {
        let payment = Payment::new(&anvil, token).await;
        let body = payment.request(&anvil, payment.requirements());
        let payee_before = anvil.balance_of(token, PAYEE);

        let first = settle(&app, None, &body).await.json();
        assert_eq!(first["success"], true, "{token}: {first}");
        assert_eq!(first["payer"], PAYER);
        assert_eq!(first["network"], "eip155:31337");
        let hash = first["transaction"].as_str().unwrap().to_owned();
        let transfers = transfers_in(&anvil, &hash).await;
        assert_eq!(
            transfers,
            vec![(PAYER.to_lowercase(), PAYEE.to_lowercase(), 1_000_000)],
            "{token}"
        );
        assert_eq!(anvil.balance_of(token, PAYEE), payee_before + 1_000_000);

        // The same payment again, without a key: no second success, and the hash that paid it.
        let again = settle(&app, None, &body).await.json();
        assert_eq!(again["success"], false, "{again}");
        assert_eq!(again["errorReason"], "invalid_exact_evm_nonce_already_used");
        assert_eq!(again["transaction"], hash.as_str());
        // And verify says the same.
        let verified = verify(&app, &body).await;
        assert_eq!(
            verified["invalidReason"],
            "invalid_exact_evm_nonce_already_used"
        );

        // The payment is an intent of the merchant, found by its key.
        let path = format!("/x402/payments/eip155:31337/{PAYER}/{}", payment.nonce);
        let found = app.get_as(DEMO_TOKEN, &path).await;
        assert_eq!(found.status, 200, "{}", found.body);
        let found = found.json();
        assert_eq!(found["success_transaction"], hash.as_str());
        assert_eq!(found["asset"], token);
        let intent = &found["payment_intent"];
        assert_eq!(intent["amount"], "1000000");
        assert_eq!(intent["payer"], PAYER);
        assert_eq!(intent["merchant"], PAYEE);
        assert_eq!(intent["checkout_url"], Value::Null);
        let id = intent["id"].as_str().unwrap().to_owned();
        app.wait_for_state(&id, "succeeded").await;
        assert_eq!(
            app.event_types(&id).await,
            [
                "payment_intent.created",
                "payment_intent.processing",
                "payment_intent.succeeded"
            ]
        );
        let booked = app.payments_booked(&id).await;
        assert_eq!(booked, 1, "{token}");
        // Another merchant cannot see it.
        assert_eq!(app.get_as(OTHER_TOKEN, &path).await.status, 404);
    }
}

/// x402's `payment-identifier` is the settle's Idempotency-Key (`docs/x402.md`, "Payment
/// identifiers"): the same id and payload is answered as the first settle was, byte for byte, and
/// pays once; the same id with another payload is refused with 409 and stores nothing; a malformed
/// id is a 400 naming the field.
#[tokio::test]
async fn a_payment_identifier_is_the_settles_idempotency_key() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let identified = |payment: &Payment, id: &str| {
        let mut body = payment.request(&anvil, payment.requirements());
        body["paymentPayload"]["extensions"] =
            json!({"payment-identifier": {"info": {"required": false, "id": id}}});
        body
    };
    let id = "pay_7d5d747be160e280504c099d984bcfe0";
    let payment = Payment::new(&anvil, TOKEN).await;
    let body = identified(&payment, id);
    let payee_before = anvil.balance_of(TOKEN, PAYEE);
    let first = settle(&app, None, &body).await;
    assert_eq!(first.json()["success"], true, "{}", first.body);
    for _ in 0..2 {
        let again = settle(&app, None, &body).await;
        assert_eq!(again.body, first.body, "the first answer, byte for byte");
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
    }
    assert_eq!(anvil.balance_of(TOKEN, PAYEE), payee_before + 1_000_000);
    let key = app
        .get_as(
            DEMO_TOKEN,
            &format!("/v1/idempotency_keys/payment-identifier:{id}"),
        )
        .await;
    assert_eq!(key.status, 200, "{}", key.body);

    // The same id, another payment: refused, nothing stored.
    let other = Payment::new(&anvil, TOKEN).await;
    let refused = app
        .post_as(
            DEMO_TOKEN,
            "/x402/settle",
            None,
            &identified(&other, id).to_string(),
        )
        .await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(refused.json()["error"], "payment_identifier_reused");
    let path = format!("/x402/payments/eip155:31337/{PAYER}/{}", other.nonce);
    assert_eq!(app.get_as(DEMO_TOKEN, &path).await.status, 404);
    // The body carries the key: an Idempotency-Key header beside it is refused.
    let both = app
        .post_as(
            DEMO_TOKEN,
            "/x402/settle",
            Some("another-key-entirely"),
            &body.to_string(),
        )
        .await;
    assert_eq!(both.status, 400, "{}", both.body);
    // A malformed id is named.
    let malformed = app
        .post_as(
            DEMO_TOKEN,
            "/x402/settle",
            None,
            &identified(&other, "short").to_string(),
        )
        .await;
    assert_eq!(malformed.status, 400, "{}", malformed.body);
    assert!(
        malformed.body.contains("payment-identifier"),
        "{}",
        malformed.body
    );
    assert_eq!(app.get_as(DEMO_TOKEN, &path).await.status, 404);
}

#[tokio::test]
async fn ten_concurrent_settles_of_one_payment_send_one_transaction_and_one_success() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let payment = Payment::new(&anvil, TOKEN).await;
    let body = payment.request(&anvil, payment.requirements());
    let settles = (0..10).map(|_| settle(&app, None, &body));
    let answers: Vec<Value> = futures::future::join_all(settles)
        .await
        .iter()
        .map(|a| a.json())
        .collect();
    let successes: Vec<&Value> = answers.iter().filter(|a| a["success"] == true).collect();
    assert_eq!(successes.len(), 1, "{answers:?}");
    let hash = successes[0]["transaction"].as_str().unwrap();
    for answer in answers.iter().filter(|a| a["success"] == false) {
        assert_eq!(
            answer["errorReason"], "invalid_exact_evm_nonce_already_used",
            "{answer}"
        );
        assert_eq!(answer["transaction"], hash, "{answer}");
    }
    let sent: Vec<Vec<String>> = sqlx::query_scalar("SELECT tx_hashes FROM chain_submissions")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(sent, vec![vec![hash.to_owned()]]);
}

#[tokio::test]
async fn the_same_nonce_with_another_payload_is_refused() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let mut payment = Payment::new(&anvil, TOKEN).await;
    let first = settle(&app, None, &payment.request(&anvil, payment.requirements()))
        .await
        .json();
    assert_eq!(first["success"], true, "{first}");
    payment.value = "2000000";
    let mut required = payment.requirements();
    required["amount"] = "2000000".into();
    let other = settle(&app, None, &payment.request(&anvil, required))
        .await
        .json();
    assert_eq!(other["success"], false, "{other}");
    assert_eq!(other["errorReason"], "invalid_exact_evm_nonce_already_used");
    assert_eq!(other["transaction"], "");
    assert_eq!(app.intent_count().await, 1);
}

#[tokio::test]
async fn a_bad_payment_is_refused_at_settle_with_the_verify_reason_and_nothing_is_stored() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let mut payment = Payment::new(&anvil, TOKEN).await;
    payment.signer = PAYEE_KEY;
    let answer = settle(
        &app,
        Some("bad-1"),
        &payment.request(&anvil, payment.requirements()),
    )
    .await
    .json();
    assert_eq!(
        (
            answer["success"].clone(),
            answer["errorReason"].clone(),
            answer["transaction"].clone()
        ),
        (
            json!(false),
            json!("invalid_exact_evm_signature"),
            json!("")
        )
    );
    assert_eq!(app.intent_count().await, 0);
}

#[tokio::test]
async fn a_settle_past_its_deadline_says_pending_and_its_retry_with_the_same_key_learns_the_outcome()
 {
    let anvil = Anvil::start().await;
    // No relayer: the payment is stored and queued, and nothing sends it.
    let waiting = app_on_with(&anvil, 1, false, |s| {
        s.request_timeout = std::time::Duration::from_secs(3)
    })
    .await;
    let payment = Payment::new(&anvil, TOKEN).await;
    let body = payment.request(&anvil, payment.requirements());
    let pending = settle(&waiting, Some("settle-1"), &body).await.json();
    assert_eq!(pending["success"], false, "{pending}");
    assert_eq!(pending["errorReason"], "settlement_pending");
    assert_eq!(pending["transaction"], "");
    let record = waiting.key_record(DEMO_MERCHANT, "settle-1").await.unwrap();
    assert_eq!(
        record.state, "in_flight",
        "a pending answer is not the key's answer"
    );

    // A replica with the relayer: the retry with the same key resumes at the stored payment.
    let relaying = relaying_replica(&anvil, &waiting).await;
    let learnt = settle(&relaying, Some("settle-1"), &body).await;
    let answer = learnt.json();
    assert_eq!(answer["success"], true, "{answer}");
    let hash = answer["transaction"].as_str().unwrap();
    assert_eq!(transfers_in(&anvil, hash).await.len(), 1);
    assert_eq!(relaying.intent_count().await, 1);
    let record = relaying
        .key_record(DEMO_MERCHANT, "settle-1")
        .await
        .unwrap();
    assert_eq!((record.state.as_str(), record.attempt), ("completed", 2));
    let resumed_at: Option<String> =
        sqlx::query_scalar("SELECT recovery_point FROM idempotency_keys WHERE key = 'settle-1'")
            .fetch_one(&relaying.db)
            .await
            .unwrap();
    assert_eq!(resumed_at.as_deref(), Some("payment_stored"));

    // The same key again replays byte for byte; another settle of it never says success.
    let replayed = settle(&relaying, Some("settle-1"), &body).await;
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.body, learnt.body);
    let other = settle(&relaying, Some("settle-2"), &body).await.json();
    assert_eq!(other["success"], false);
    assert_eq!(other["transaction"], hash);
}

/// A reorg drops the transfer a settle answered success with, before `validBefore`: the payment
/// stays `processing`, the relayer sends it again, and the ledger books the transfer that is
/// finally confirmed, once.
#[tokio::test]
async fn a_transfer_dropped_by_a_reorg_is_sent_again_and_booked_once() {
    let anvil = Anvil::start().await;
    let settlement = anvil.settlement(3);
    let app = TestApp::spawn_with(move |s| {
        s.settlement = settlement;
        s.settlement.relayer_private_key = Some(RELAYER_KEY.to_owned());
    })
    .await;
    let payment = Payment::new(&anvil, TOKEN).await;
    let body = payment.request(&anvil, payment.requirements());
    let before = anvil.balance_of(TOKEN, PAYEE);
    let snapshot = anvil.rpc("evm_snapshot", json!([])).await;
    let first = settle(&app, None, &body).await.json();
    assert_eq!(first["success"], true, "{first}");
    let answered = first["transaction"].as_str().unwrap().to_owned();

    // The block with the transfer is orphaned, and the chain grows others.
    anvil.rpc("evm_revert", json!([snapshot])).await;
    assert_eq!(anvil.balance_of(TOKEN, PAYEE), before);
    let path = format!("/x402/payments/eip155:31337/{PAYER}/{}", payment.nonce);
    let id = app.get_as(DEMO_TOKEN, &path).await.json()["payment_intent"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Unmined for RELAYER_REPLACE_AFTER_BLOCKS (2): the relayer sends it again, and it is mined.
    anvil.mine(2).await;
    app.wait_until(
        "the relayer sent the payment again",
        "(SELECT cardinality(tx_hashes) FROM chain_submissions) >= 2",
    )
    .await;
    anvil.mine(3).await;
    app.wait_for_state(&id, "succeeded").await;
    assert_eq!(anvil.balance_of(TOKEN, PAYEE), before + 1_000_000);
    let booked: Vec<String> = sqlx::query_scalar(
        "SELECT transaction_hash FROM ledger_entries WHERE intent_id = $1 AND kind = 'payment'",
    )
    .bind(&id)
    .fetch_all(&app.db)
    .await
    .unwrap();
    assert_eq!(booked.len(), 1, "{booked:?}");
    assert_ne!(
        booked[0], answered,
        "the confirmed transfer is the one sent again"
    );
    let intent = app.get_as(DEMO_TOKEN, &path).await.json()["payment_intent"].clone();
    assert_eq!(intent["settlement"]["transaction_hash"], booked[0].as_str());
    // Another settle of it still never says success.
    let again = settle(&app, None, &body).await.json();
    assert_eq!(again["success"], false, "{again}");
}

/// A smart-contract wallet pays (ERC-1271): its owner's key signs, verify and settle ask the wallet
/// on chain, and the relayer submits USDC's `bytes signature` form, which USDC checks with the
/// wallet too. Another key's signature the wallet refuses. The devnet token has the `bytes
/// signature` form but checks only keys: verify asks the token itself, and says so, rather than
/// accept a payment that could never be made.
#[tokio::test]
async fn a_smart_contract_wallet_pays_through_x402_where_the_token_checks_wallets() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let wallet = anvil.deploy_wallet(PAYER_KEY);
    for token in [USDC, TOKEN] {
        anvil.cast(&[
            "send",
            "--private-key",
            PAYER_KEY,
            token,
            "transfer(address,uint256)",
            &wallet,
            "5000000",
        ]);
    }
    let mut payment = Payment::new(&anvil, USDC).await;
    payment.from = wallet.clone();
    let body = payment.request(&anvil, payment.requirements());
    assert_eq!(
        verify(&app, &body).await,
        json!({"isValid": true, "payer": wallet})
    );
    let before = anvil.balance_of(USDC, PAYEE);
    let settled = settle(&app, None, &body).await.json();
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(settled["payer"], wallet.as_str());
    let transfers = transfers_in(&anvil, settled["transaction"].as_str().unwrap()).await;
    assert_eq!(
        transfers,
        vec![(wallet.to_lowercase(), PAYEE.to_lowercase(), 1_000_000)]
    );
    assert_eq!(anvil.balance_of(USDC, PAYEE), before + 1_000_000);

    let mut stranger = Payment::new(&anvil, USDC).await;
    stranger.from = wallet.clone();
    stranger.signer = PAYEE_KEY;
    let refused = verify(&app, &stranger.request(&anvil, stranger.requirements())).await;
    assert_eq!(refused["invalidReason"], "invalid_exact_evm_signature");
    assert!(
        refused["invalidMessage"]
            .as_str()
            .unwrap()
            .contains("refuses it (ERC-1271"),
        "{refused}"
    );

    let mut devnet = Payment::new(&anvil, TOKEN).await;
    devnet.from = wallet.clone();
    let body = devnet.request(&anvil, devnet.requirements());
    let refused = verify(&app, &body).await;
    assert_eq!(refused["invalidReason"], "invalid_exact_evm_signature");
    assert!(
        refused["invalidMessage"]
            .as_str()
            .unwrap()
            .contains("checks only keys"),
        "{refused}"
    );
    let settled = settle(&app, None, &body).await.json();
    assert_eq!(
        settled["errorReason"], "invalid_exact_evm_signature",
        "{settled}"
    );
    assert_eq!(
        app.intent_count().await,
        1,
        "nothing stored for a payment that cannot be made"
    );
}

/// What a payment cannot be is refused with a reason, never a 500, and nothing is stored: a
/// `validBefore` in milliseconds, a payment of nothing, the nonce of one of our own intents.
#[tokio::test]
async fn payments_that_cannot_be_kept_are_refused_with_a_reason() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil, 1, true).await;
    let mut milliseconds = Payment::new(&anvil, TOKEN).await;
    milliseconds.valid_before *= 1000;
    let mut nothing = Payment::new(&anvil, TOKEN).await;
    nothing.value = "0";
    let mut requires_nothing = nothing.requirements();
    requires_nothing["amount"] = "0".into();
    for (what, body) in [
        (
            "milliseconds",
            milliseconds.request(&anvil, milliseconds.requirements()),
        ),
        ("nothing", nothing.request(&anvil, requires_nothing)),
    ] {
        for path in ["/x402/verify", "/x402/settle"] {
            let answer = app.post_as(DEMO_TOKEN, path, None, &body.to_string()).await;
            assert_eq!(answer.status, 200, "{what} {path}: {}", answer.body);
            let answer = answer.json();
            let reason = answer.get("invalidReason").or(answer.get("errorReason"));
            assert_eq!(
                reason,
                Some(&json!("invalid_exact_evm_payload")),
                "{what} {path}: {answer}"
            );
        }
    }
    assert_eq!(app.intent_count().await, 0);

    // The nonce of an intent of ours, still `created`: held, whoever signs it.
    let id = app.create_intent_id(crate::helpers::SEED_BODY).await;
    let typed = app.typed_data(&id).await;
    let mut reused = Payment::new(&anvil, TOKEN).await;
    reused.nonce = typed["message"]["nonce"].as_str().unwrap().to_owned();
    let answer = settle(&app, None, &reused.request(&anvil, reused.requirements()))
        .await
        .json();
    assert_eq!(
        answer["errorReason"], "invalid_exact_evm_nonce_already_used",
        "{answer}"
    );
    assert_eq!(app.intent_count().await, 1);
}

/// Without a key, a settle past its deadline says pending, and the next settle of the payment,
/// once the transfer is in a block, claims its one success: a "not yet" never used it up.
#[tokio::test]
async fn an_unkeyed_settle_after_a_pending_one_gets_the_one_success() {
    let anvil = Anvil::start().await;
    let waiting = app_on_with(&anvil, 1, false, |s| {
        s.request_timeout = std::time::Duration::from_secs(3)
    })
    .await;
    let payment = Payment::new(&anvil, TOKEN).await;
    let body = payment.request(&anvil, payment.requirements());
    let pending = settle(&waiting, None, &body).await.json();
    assert_eq!(pending["errorReason"], "settlement_pending", "{pending}");
    let relaying = relaying_replica(&anvil, &waiting).await;
    let answer = settle(&relaying, None, &body).await.json();
    assert_eq!(answer["success"], true, "{answer}");
    let again = settle(&relaying, None, &body).await.json();
    assert_eq!(again["success"], false, "{again}");
    assert_eq!(again["transaction"], answer["transaction"]);
}

/// A process killed while its settle waits for the chain: the payment it stored stays, queued;
/// once the lease runs out, the retry with the same key takes the key over at the recovery point,
/// another replica relays the payment, and the retry answers the one success. One transfer.
#[tokio::test]
async fn a_settle_whose_process_is_killed_while_waiting_is_learnt_by_its_retry() {
    use crate::helpers::{ServerProcess, chain::settlement_env};

    let anvil = Anvil::start().await;
    // The test's view of the database; it relays nothing.
    let view = app_on(&anvil, 1, false).await;
    let mut env: Vec<(String, String)> = settlement_env(&anvil.url, 1, false);
    env.push(("IDEMPOTENCY_LEASE_SECONDS".into(), "6".into()));
    env.push(("REQUEST_TIMEOUT_SECONDS".into(), "5".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut server = ServerProcess::start(&view.database_url, &env).await;

    let payment = Payment::new(&anvil, TOKEN).await;
    let body = payment.request(&anvil, payment.requirements());
    let before = anvil.balance_of(TOKEN, PAYEE);
    let doomed = tokio::spawn({
        let (client, url, body) = (
            reqwest::Client::new(),
            format!("{}/x402/settle", server.address),
            body.to_string(),
        );
        async move {
            client
                .post(url)
                .bearer_auth(DEMO_TOKEN)
                .header("idempotency-key", "settle-killed")
                .body(body)
                .send()
                .await
        }
    });
    view.wait_until(
        "the settle stored its payment and committed its phase",
        "SELECT recovery_point = 'payment_stored' FROM idempotency_keys WHERE key = 'settle-killed'",
    )
    .await;
    server.child.kill().expect("SIGKILL the server");
    server.child.wait().unwrap();
    assert!(
        doomed.await.unwrap().is_err(),
        "the client saw the connection die"
    );
    assert_eq!(view.intent_count().await, 1, "the stored payment stays");

    view.wait_until(
        "the lease has expired",
        "SELECT lease_expires_at <= now() FROM idempotency_keys WHERE key = 'settle-killed'",
    )
    .await;
    let relaying = relaying_replica(&anvil, &view).await;
    let answer = settle(&relaying, Some("settle-killed"), &body).await.json();
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(
        transfers_in(&anvil, answer["transaction"].as_str().unwrap())
            .await
            .len(),
        1
    );
    let record = relaying
        .key_record(DEMO_MERCHANT, "settle-killed")
        .await
        .unwrap();
    assert_eq!((record.state.as_str(), record.attempt), ("completed", 2));
    assert_eq!(relaying.intent_count().await, 1);
    assert_eq!(
        anvil.balance_of(TOKEN, PAYEE),
        before + 1_000_000,
        "paid once"
    );
}
