//! payments-api as an x402 facilitator (`docs/x402.md`): `/x402/supported`, and `/x402/verify`
//! answering each bad payment with the reference facilitator's `invalidReason`. Payments are
//! EIP-3009 authorizations signed by cast over the domain the requirements name.

use serde_json::{Value, json};

use crate::helpers::{
    DEMO_TOKEN, TestApp,
    chain::{Anvil, PAYEE, PAYEE_KEY, PAYER, PAYER_KEY, RELAYER_KEY, TOKEN, USDC},
};

async fn app_on(anvil: &Anvil) -> TestApp {
    let settlement = anvil.settlement(1);
    TestApp::spawn_with(move |s| {
        s.settlement = settlement;
        s.settlement.relayer_private_key = Some(RELAYER_KEY.to_owned());
    })
    .await
}

async fn chain_time(anvil: &Anvil) -> u64 {
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
                "from": PAYER, "to": self.to, "value": self.value,
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
    let app = app_on(&anvil).await;
    let answer = app.get_as(DEMO_TOKEN, "/x402/supported").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let relayer = anvil.cast(&["wallet", "address", "--private-key", RELAYER_KEY]);
    assert_eq!(
        answer.json(),
        json!({
            "kinds": [{"x402Version": 2, "scheme": "exact", "network": "eip155:31337"}],
            "extensions": [],
            "signers": {"eip155:*": [relayer]},
        })
    );
    assert_eq!(app.get("/x402/supported").await.status, 401);
}

#[tokio::test]
async fn verify_accepts_a_good_payment_in_either_token_and_writes_nothing() {
    let anvil = Anvil::start().await;
    let app = app_on(&anvil).await;
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
    let app = app_on(&anvil).await;
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
