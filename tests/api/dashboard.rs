//! The dashboard over real HTTP, as a browser without JavaScript drives it: invitations and
//! passwords, sessions and their cookies, CSRF tokens, roles enforced by the server, escaping,
//! search, and the audit log. The walk in a real browser is `tests/browser/dashboard.test.mjs`.

use std::collections::HashMap;

use reqwest::{Client, redirect::Policy};
use standardwebhooks::Webhook;

use crate::helpers::{DEMO_MERCHANT, DEMO_TOKEN, OTHER_TOKEN, Receiver, SEED_BODY, TestApp};

const PASSWORD: &str = "correct horse battery staple";

/// A browser's part: its cookies (set by the server, sent back to it) and no redirects followed,
/// so each answer is seen as sent.
struct Browser {
    base: String,
    client: Client,
    cookies: HashMap<String, String>,
}

struct Page {
    status: u16,
    location: Option<String>,
    set_cookies: Vec<String>,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Page {
    /// The value of `<input … name="{name}" … value="…">` in the page.
    fn field(&self, name: &str) -> String {
        let at = self
            .body
            .find(&format!("name=\"{name}\""))
            .unwrap_or_else(|| panic!("no field {name} in {}", self.body));
        let rest = &self.body[at..];
        let value = &rest[rest.find("value=\"").expect("a value") + 7..];
        value[..value.find('"').unwrap()].to_owned()
    }
}

impl Browser {
    fn new(app: &TestApp) -> Self {
        Self {
            base: app.address.clone(),
            client: Client::builder().redirect(Policy::none()).build().unwrap(),
            cookies: HashMap::new(),
        }
    }

    async fn send(&mut self, request: reqwest::RequestBuilder) -> Page {
        let cookie: Vec<String> = self
            .cookies
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        let request = if cookie.is_empty() {
            request
        } else {
            request.header("cookie", cookie.join("; "))
        };
        let response = request.send().await.unwrap();
        let set_cookies: Vec<String> = response
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        for set in &set_cookies {
            let pair = set.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() || set.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        Page {
            status: response.status().as_u16(),
            location: response
                .headers()
                .get("location")
                .map(|v| v.to_str().unwrap().to_owned()),
            headers: response.headers().clone(),
            set_cookies,
            body: response.text().await.unwrap(),
        }
    }

    async fn get(&mut self, path: &str) -> Page {
        let request = self.client.get(format!("{}{path}", self.base));
        self.send(request).await
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let request = self.client.post(format!("{}{path}", self.base)).form(form);
        self.send(request).await
    }

    /// Signs in through the form, as a person does.
    async fn sign_in(&mut self, email: &str, password: &str) -> Page {
        let form = self.get("/dashboard/login").await;
        let check = form.field("check");
        self.post(
            "/dashboard/login",
            &[("email", email), ("password", password), ("check", &check)],
        )
        .await
    }

    /// A form post of a signed-in page, with the CSRF token that page carries.
    async fn act(&mut self, page: &str, path: &str, form: &[(&str, &str)]) -> Page {
        let csrf = self.get(page).await.field("csrf");
        let mut fields = form.to_vec();
        fields.push(("csrf", &csrf));
        self.post(path, &fields).await
    }
}

/// `payments-api users create`, then the person sets their password through the link; the
/// token of the link.
async fn person(app: &TestApp, merchant: &str, email: &str, role: &str) -> Browser {
    let (ok, link) = app.command(&[
        "users",
        "create",
        "--merchant",
        merchant,
        "--email",
        email,
        "--role",
        role,
    ]);
    assert!(ok, "{link}");
    let token = link
        .split("token=")
        .nth(1)
        .unwrap_or_else(|| panic!("{link}"));
    let mut browser = Browser::new(app);
    let form = browser
        .get(&format!("/dashboard/password?token={token}"))
        .await;
    assert_eq!(form.status, 200, "{}", form.body);
    let set = browser
        .post(
            "/dashboard/password",
            &[("token", token), ("password", PASSWORD)],
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    let signed = browser.sign_in(email, PASSWORD).await;
    assert_eq!(signed.status, 303, "{}", signed.body);
    browser
}

async fn create_intent(app: &TestApp, key: &str, body: &str) -> String {
    let created = app.create_intent(DEMO_TOKEN, Some(key), body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    created.json()["id"].as_str().unwrap().to_owned()
}

async fn intent_state(app: &TestApp, id: &str) -> String {
    sqlx::query_scalar("SELECT state FROM payment_intents WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .unwrap()
}

async fn audit_actions(app: &TestApp, merchant: &str) -> Vec<(String, String)> {
    sqlx::query_as("SELECT actor, action FROM audit_log WHERE merchant_id = $1 ORDER BY id")
        .bind(merchant)
        .fetch_all(&app.db)
        .await
        .unwrap()
}

/// An invitation's link sets a password once; a short password is refused; sign-in gives a new
/// session id in a cookie that scripts cannot read and other sites do not send, whatever id the
/// browser brought; signing out ends the session for every holder of the cookie.
#[tokio::test]
async fn an_invited_person_sets_a_password_once_and_signs_in_with_a_fresh_session() {
    let app = TestApp::spawn().await;
    let (ok, link) = app.command(&[
        "users",
        "create",
        "--merchant",
        DEMO_MERCHANT,
        "--email",
        "Ana@Shop.Example",
        "--role",
        "owner",
    ]);
    assert!(ok, "{link}");
    assert!(
        link.starts_with("http://localhost:8080/dashboard/password?token="),
        "{link}"
    );
    let token = link.split("token=").nth(1).unwrap();
    let mut browser = Browser::new(&app);

    let short = browser
        .post(
            "/dashboard/password",
            &[("token", token), ("password", "too short")],
        )
        .await;
    assert_eq!(short.status, 400);
    assert!(
        short.body.contains("at least 12 characters"),
        "{}",
        short.body
    );
    let set = browser
        .post(
            "/dashboard/password",
            &[("token", token), ("password", PASSWORD)],
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    let again = browser
        .post(
            "/dashboard/password",
            &[("token", token), ("password", "another long password")],
        )
        .await;
    assert_eq!(again.status, 404, "a link works once");
    let stored: String = sqlx::query_scalar(
        "SELECT password_hash FROM dashboard_users WHERE email = 'ana@shop.example'",
    )
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert!(stored.starts_with("$argon2id$"), "{stored}");

    // A session id planted before sign-in (fixation) is never adopted.
    browser
        .cookies
        .insert("dashboard_session".into(), "a".repeat(64));
    assert_eq!(browser.get("/dashboard/payments").await.status, 303);
    let signed = browser.sign_in("ana@shop.example", PASSWORD).await;
    assert_eq!(signed.status, 303, "{}", signed.body);
    assert_eq!(signed.location.as_deref(), Some("/dashboard/payments"));
    let cookie = signed
        .set_cookies
        .iter()
        .find(|c| c.starts_with("dashboard_session="))
        .expect("a session cookie");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/dashboard"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "PUBLIC_BASE_URL is http://localhost: {cookie}"
    );
    let session_id = browser.cookies["dashboard_session"].clone();
    assert_ne!(session_id, "a".repeat(64));

    let payments = browser.get("/dashboard/payments").await;
    assert_eq!(payments.status, 200, "{}", payments.body);
    assert!(
        payments
            .body
            .contains("<title>Payments · Dashboard</title>")
    );
    assert_eq!(payments.body.matches("<h1>").count(), 1);
    assert!(payments.body.contains("<nav aria-label=\"Main\">"));
    for (header, value) in [
        ("x-frame-options", "DENY"),
        ("cache-control", "no-store"),
        ("referrer-policy", "no-referrer"),
    ] {
        assert_eq!(payments.headers[header], value);
    }
    let policy = payments.headers["content-security-policy"]
        .to_str()
        .unwrap();
    assert!(policy.contains("frame-ancestors 'none'") && policy.contains("script-src 'self'"));

    // The same cookie in a second browser, then a sign-out in the first: both are out.
    let mut second = Browser::new(&app);
    second
        .cookies
        .insert("dashboard_session".into(), session_id.clone());
    assert_eq!(second.get("/dashboard/payments").await.status, 200);
    let out = browser
        .act("/dashboard/payments", "/dashboard/logout", &[])
        .await;
    assert_eq!(out.status, 303);
    assert_eq!(second.get("/dashboard/payments").await.status, 303);
    let actions = audit_actions(&app, DEMO_MERCHANT).await;
    let names: Vec<&str> = actions.iter().map(|(_, a)| a.as_str()).collect();
    assert_eq!(
        names,
        [
            "user.invite",
            "user.set_password",
            "session.sign_in",
            "session.sign_out"
        ]
    );
    assert_eq!(actions[0].0, "cli");
    assert_eq!(actions[2].0, "user:ana@shop.example");
    let address: Option<String> =
        sqlx::query_scalar("SELECT address FROM audit_log WHERE action = 'session.sign_in'")
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(address.as_deref(), Some("127.0.0.1"));
}

/// Wrong password and unknown email get the same answer; failures of an account past the limit
/// refuse even the right password, until the window passes.
#[tokio::test]
async fn failed_sign_ins_look_alike_and_are_refused_past_the_limit() {
    let app = TestApp::spawn().await;
    let mut owner = person(&app, DEMO_MERCHANT, "owner@shop.example", "owner").await;
    let wrong = owner
        .sign_in("owner@shop.example", "not the password")
        .await;
    let unknown = owner
        .sign_in("nobody@shop.example", "not the password")
        .await;
    assert_eq!((wrong.status, unknown.status), (401, 401));
    let notice = |page: &Page| {
        let at = page.body.find("role=\"alert\"").expect("an alert");
        page.body[at..at + 120].to_owned()
    };
    assert_eq!(notice(&wrong), notice(&unknown));

    sqlx::query(
        "INSERT INTO dashboard_sign_in_failures (subject)
         SELECT 'email:owner@shop.example' FROM generate_series(1, 10)",
    )
    .execute(&app.db)
    .await
    .unwrap();
    let locked = owner.sign_in("owner@shop.example", PASSWORD).await;
    assert_eq!(locked.status, 429, "{}", locked.body);
    sqlx::query("UPDATE dashboard_sign_in_failures SET at = now() - interval '16 minutes'")
        .execute(&app.db)
        .await
        .unwrap();
    assert_eq!(
        owner.sign_in("owner@shop.example", PASSWORD).await.status,
        303
    );
}

/// A viewer reads, a developer also manages keys, an owner also cancels and manages the team:
/// each forbidden action is 403 against the endpoint itself and changes nothing.
#[tokio::test]
async fn roles_are_enforced_by_the_server_for_every_action() {
    let app = TestApp::spawn().await;
    let mut owner = person(&app, DEMO_MERCHANT, "owner@shop.example", "owner").await;
    let mut developer = person(&app, DEMO_MERCHANT, "dev@shop.example", "developer").await;
    let mut viewer = person(&app, DEMO_MERCHANT, "viewer@shop.example", "viewer").await;
    let id = create_intent(&app, "order-1", SEED_BODY).await;
    let page = format!("/dashboard/payments/{id}");
    let cancel = format!("{page}/cancel");
    let keys = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM api_keys")
            .fetch_one(&app.db)
            .await
            .unwrap()
    };
    let keys_before = keys().await;

    for browser in [&mut viewer, &mut developer] {
        let seen = browser.get(&page).await;
        assert_eq!(seen.status, 200);
        assert!(!seen.body.contains("/cancel"), "no Cancel button shown");
        assert_eq!(browser.act(&page, &cancel, &[]).await.status, 403);
    }
    assert_eq!(intent_state(&app, &id).await, "created");
    let refused = viewer
        .act("/dashboard/api-keys", "/dashboard/api-keys", &[])
        .await;
    assert_eq!(refused.status, 403);
    assert!(!refused.body.contains("sk_live_"));
    let invite = [("email", "x@shop.example"), ("role", "owner")];
    for browser in [&mut viewer, &mut developer] {
        let refused = browser
            .act("/dashboard/team", "/dashboard/team", &invite)
            .await;
        assert_eq!(refused.status, 403);
    }
    assert_eq!(keys().await, keys_before);
    // The merchant's settings are an owner's: the payout address and the accepted assets too.
    let payout = [
        ("display_name", "Mine"),
        (
            "payout_address",
            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        ),
    ];
    let asset = [
        ("do", "add"),
        ("chain", "evm:31337"),
        ("token", "0x5FbDB2315678afecb367f032d93F642f64180aa3"),
        ("currency", "usd"),
    ];
    let settings_rows = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM merchants")
            .fetch_one(&app.db)
            .await
            .unwrap()
    };
    let settings_before = settings_rows().await;
    for browser in [&mut viewer, &mut developer] {
        let settings = "/dashboard/settings";
        assert_eq!(browser.act(settings, settings, &payout).await.status, 403);
        let assets = "/dashboard/settings/assets";
        assert_eq!(browser.act(settings, assets, &asset).await.status, 403);
    }
    assert_eq!(
        settings_rows().await,
        settings_before,
        "no settings were written"
    );

    let created = developer
        .act("/dashboard/api-keys", "/dashboard/api-keys", &[])
        .await;
    assert_eq!(created.status, 200);
    let secret_at = created.body.find("sk_live_").expect("the new key, once");
    let secret = created.body[secret_at..secret_at + 72].to_owned();
    assert_eq!(keys().await, keys_before + 1);
    assert_eq!(app.get_as(&secret, "/v1/payment_intents").await.status, 200);
    let listed = developer.get("/dashboard/api-keys").await;
    assert!(listed.body.contains(&secret[..16]), "listed by its prefix");
    assert!(!listed.body.contains(&secret), "the secret is shown once");
    let revoked = developer
        .act(
            "/dashboard/api-keys",
            "/dashboard/api-keys/revoke",
            &[("prefix", &secret[..16])],
        )
        .await;
    assert_eq!(revoked.status, 303);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while app.get_as(&secret, "/v1/payment_intents").await.status != 401 {
        assert!(tokio::time::Instant::now() < deadline, "still accepted");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let canceled = owner.act(&page, &cancel, &[]).await;
    assert_eq!(canceled.status, 303, "{}", canceled.body);
    assert_eq!(intent_state(&app, &id).await, "canceled");
    let shown = owner.get(canceled.location.as_deref().unwrap()).await;
    assert!(shown.body.contains("role=\"status\""), "{}", shown.body);
    let again = owner.act(&page, &cancel, &[]).await;
    assert_eq!(again.status, 409, "a canceled intent stays canceled");
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE subject_id = $1")
        .bind(&id)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(events, 2, "created and canceled");

    let actions: Vec<String> = audit_actions(&app, DEMO_MERCHANT)
        .await
        .into_iter()
        .filter(|(actor, _)| actor != "cli")
        .map(|(actor, action)| format!("{actor} {action}"))
        .filter(|line| !line.contains("session.") && !line.contains("set_password"))
        .collect();
    assert_eq!(
        actions,
        [
            "user:dev@shop.example api_key.create",
            "user:dev@shop.example api_key.revoke",
            "user:owner@shop.example payment_intent.cancel",
        ]
    );
}

/// Changes need the session's CSRF token: a post without it, with another session's, or from
/// another site (which SameSite=Strict strips of the cookie) changes nothing.
#[tokio::test]
async fn a_change_without_the_sessions_csrf_token_changes_nothing() {
    let app = TestApp::spawn().await;
    let mut owner = person(&app, DEMO_MERCHANT, "owner@shop.example", "owner").await;
    let mut other = person(&app, DEMO_MERCHANT, "other@shop.example", "owner").await;
    let id = create_intent(&app, "order-1", SEED_BODY).await;
    let cancel = format!("/dashboard/payments/{id}/cancel");

    assert_eq!(owner.post(&cancel, &[]).await.status, 403);
    let others = other.get("/dashboard/payments").await.field("csrf");
    assert_eq!(owner.post(&cancel, &[("csrf", &others)]).await.status, 403);
    let own = owner.get("/dashboard/payments").await.field("csrf");
    let mut cross_site = Browser::new(&app);
    let refused = cross_site.post(&cancel, &[("csrf", &own)]).await;
    assert_eq!(
        (refused.status, refused.location.as_deref()),
        (303, Some("/dashboard/login"))
    );
    assert_eq!(intent_state(&app, &id).await, "created");

    // The sign-in form is tied to the browser that loaded it.
    let mut stranger = Browser::new(&app);
    let forged = stranger
        .post(
            "/dashboard/login",
            &[
                ("email", "owner@shop.example"),
                ("password", PASSWORD),
                ("check", "0"),
            ],
        )
        .await;
    assert_eq!(forged.status, 403);
    assert!(!stranger.cookies.contains_key("dashboard_session"));
}

/// Metadata and emails with markup are shown as text; the last owner cannot be removed or
/// demoted; the audit log refuses to be edited.
#[tokio::test]
async fn hostile_text_is_shown_escaped_and_the_last_owner_stays() {
    let app = TestApp::spawn().await;
    let mut owner = person(&app, DEMO_MERCHANT, "owner@shop.example", "owner").await;
    let body = SEED_BODY.replace(
        r#""expires_in_seconds":900"#,
        r#""expires_in_seconds":900,"metadata":{"note":"<script>alert(1)</script>"}"#,
    );
    let id = create_intent(&app, "order-xss", &body).await;
    let page = owner.get(&format!("/dashboard/payments/{id}")).await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("<script>alert(1)"), "{}", page.body);
    assert!(page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));

    let invited = owner
        .act(
            "/dashboard/team",
            "/dashboard/team",
            &[
                ("email", "\"><img/src=x/onerror=alert(1)>@x.example"),
                ("role", "viewer"),
            ],
        )
        .await;
    assert_eq!(invited.status, 200, "{}", invited.body);
    assert!(!invited.body.contains("<img/src=x"), "{}", invited.body);
    assert!(
        invited
            .body
            .contains("&lt;img/src=x/onerror=alert(1)&gt;@x.example")
    );
    assert!(invited.body.contains("/dashboard/password?token="));

    let me: String = sqlx::query_scalar("SELECT id FROM dashboard_users WHERE email = $1")
        .bind("owner@shop.example")
        .fetch_one(&app.db)
        .await
        .unwrap();
    let path = format!("/dashboard/team/{me}");
    for change in [
        [("do", "remove"), ("role", "")],
        [("do", "change"), ("role", "viewer")],
    ] {
        let refused = owner.act("/dashboard/team", &path, &change).await;
        assert_eq!(refused.status, 409, "{}", refused.body);
    }
    let role: String = sqlx::query_scalar("SELECT role FROM dashboard_users WHERE id = $1")
        .bind(&me)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(role, "owner");

    let edited = sqlx::query("UPDATE audit_log SET actor = 'someone else'")
        .execute(&app.db)
        .await;
    assert!(edited.is_err(), "the audit log is append-only");
    let deleted = sqlx::query("DELETE FROM audit_log").execute(&app.db).await;
    assert!(deleted.is_err(), "and kept for a year");

    // The CLI's changes are in it too.
    let (ok, said) = app.command(&["limits", "set", "--merchant", DEMO_MERCHANT, "--rate", "50"]);
    assert!(ok, "{said}");
    let actions = audit_actions(&app, DEMO_MERCHANT).await;
    assert!(
        actions.contains(&("cli".to_owned(), "limits.set".to_owned())),
        "{actions:?}"
    );
}

/// The payments list: newest first in pages of 25, filtered by state, found by id, by the
/// Idempotency-Key it was created with, by payer, and only the merchant's own.
#[tokio::test]
async fn payments_are_listed_in_pages_and_found_by_id_key_and_payer() {
    let app = TestApp::spawn().await;
    let mut viewer = person(&app, DEMO_MERCHANT, "viewer@shop.example", "viewer").await;
    let mut ids = Vec::new();
    for n in 0..27 {
        ids.push(create_intent(&app, &format!("order-{n}"), SEED_BODY).await);
    }
    let other = app
        .create_intent(OTHER_TOKEN, Some("order-0"), SEED_BODY)
        .await;
    let other_id = other.json()["id"].as_str().unwrap().to_owned();

    let first = viewer.get("/dashboard/payments").await;
    let rows = |page: &Page| {
        page.body
            .matches("<a href=\"/dashboard/payments/pi_")
            .count()
    };
    assert_eq!(rows(&first), 25);
    assert!(first.body.contains(&ids[26]), "newest first");
    assert!(!first.body.contains(&other_id), "only the merchant's own");
    let next = first.body.split("rel=\"next\"").next().unwrap();
    let href = &next[next.rfind("href=\"").unwrap() + 6..];
    let href = href[..href.find('"').unwrap()].replace("&amp;", "&");
    let second = viewer.get(&href).await;
    assert_eq!(rows(&second), 2);
    assert!(second.body.contains(&ids[0]));

    let by_key = viewer.get("/dashboard/payments?q=order-3").await;
    assert_eq!(rows(&by_key), 1);
    assert!(by_key.body.contains(&ids[3]));
    let by_id = viewer
        .get(&format!("/dashboard/payments?q={}", ids[5]))
        .await;
    assert_eq!(rows(&by_id), 1);
    let foreign = viewer
        .get(&format!("/dashboard/payments?q={other_id}"))
        .await;
    assert_eq!(rows(&foreign), 0);
    let by_payer = viewer
        .get("/dashboard/payments?q=0x70997970c51812dc3a010c7d01b50e0d17dc79c8")
        .await;
    assert_eq!(
        rows(&by_payer),
        25,
        "lower-case finds the checksummed payer"
    );
    let canceled = viewer.get("/dashboard/payments?state=canceled").await;
    assert_eq!(rows(&canceled), 0);
    let bad = viewer.get("/dashboard/payments?state=nonsense").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("state"), "the field is named");
}

/// A developer adds an endpoint (its secret shown once), sends it a test event the receiver
/// verifies with the Standard Webhooks library, and resends a failed delivery, which arrives with
/// the same id.
#[tokio::test]
async fn a_developer_adds_an_endpoint_sends_a_test_event_and_resends_a_failed_delivery() {
    let app = TestApp::spawn().await;
    let receiver = Receiver::start(vec![]).await;
    let mut developer = person(&app, DEMO_MERCHANT, "dev@shop.example", "developer").await;
    let added = developer
        .act(
            "/dashboard/webhooks",
            "/dashboard/webhooks",
            &[("url", &receiver.url), ("description", "<b>orders</b>")],
        )
        .await;
    assert_eq!(added.status, 200, "{}", added.body);
    let at = added.body.find("whsec_").expect("the secret, once");
    let secret = added.body[at..at + 50]
        .split('<')
        .next()
        .unwrap()
        .to_owned();
    let listed = developer.get("/dashboard/webhooks").await;
    assert!(!listed.body.contains(&secret), "shown once");
    assert!(listed.body.contains("&lt;b&gt;orders&lt;/b&gt;"));
    let endpoint: String = sqlx::query_scalar("SELECT id FROM webhook_endpoints")
        .fetch_one(&app.db)
        .await
        .unwrap();
    let page = format!("/dashboard/webhooks/{endpoint}");

    let sent = developer.act(&page, &page, &[("do", "test")]).await;
    assert_eq!(sent.status, 303);
    let received = receiver.wait_for(1).await;
    let verified = Webhook::new(&secret)
        .unwrap()
        .verify(&received[0].body, &received[0].headers);
    assert!(verified.is_ok(), "{verified:?}");
    let event: serde_json::Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(event["type"], "webhook_endpoint.test");
    let event_id = event["id"].as_str().unwrap().to_owned();
    app.wait_until(
        "the test event is delivered",
        &format!(
            "SELECT state = 'delivered' FROM webhook_deliveries WHERE event_id = '{event_id}'"
        ),
    )
    .await;

    // A delivery whose retries ran out: failed, then resent from its page.
    sqlx::query("UPDATE webhook_deliveries SET state = 'failed', finished_at = now()")
        .execute(&app.db)
        .await
        .unwrap();
    let viewer_refused = {
        let mut viewer = person(&app, DEMO_MERCHANT, "viewer@shop.example", "viewer").await;
        viewer
            .act(&page, &page, &[("do", "resend"), ("event", &event_id)])
            .await
            .status
    };
    assert_eq!(viewer_refused, 403);
    let resent = developer
        .act(&page, &page, &[("do", "resend"), ("event", &event_id)])
        .await;
    assert_eq!(resent.status, 303, "{}", resent.body);
    let again = receiver.wait_for(2).await;
    assert_eq!(
        again[1].headers["webhook-id"],
        again[0].headers["webhook-id"]
    );
    app.wait_until(
        "the resent delivery is delivered",
        &format!(
            "SELECT state = 'delivered' FROM webhook_deliveries WHERE event_id = '{event_id}'"
        ),
    )
    .await;
    let shown = developer.get(&page).await;
    assert!(
        shown.body.contains("webhook_endpoint.test"),
        "{}",
        shown.body
    );
}

/// The export is RFC 4180 CSV a library parses back: a header and a row per intent of the range,
/// oldest first; a bad range is a 400 naming the field.
#[tokio::test]
async fn payments_export_as_csv_for_a_date_range() {
    let app = TestApp::spawn().await;
    let mut viewer = person(&app, DEMO_MERCHANT, "viewer@shop.example", "viewer").await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(create_intent(&app, &format!("order-{n}"), SEED_BODY).await);
    }
    let today = time::OffsetDateTime::now_utc().date();
    let format = time::format_description::parse("[year]-[month]-[day]").unwrap();
    let day = today.format(&format).unwrap();
    let export = viewer
        .get(&format!(
            "/dashboard/export.csv?what=payments&from={day}&to={day}"
        ))
        .await;
    assert_eq!(export.status, 200, "{}", export.body);
    assert_eq!(export.headers["content-type"], "text/csv; charset=utf-8");
    assert!(
        export.headers["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment; filename=\"payments-")
    );
    let mut reader = csv::Reader::from_reader(export.body.as_bytes());
    let header = reader.headers().unwrap().clone();
    assert_eq!(&header[0], "id");
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let exported: Vec<&str> = rows.iter().map(|r| &r[0]).collect();
    assert_eq!(exported, ids.iter().map(String::as_str).collect::<Vec<_>>());
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    assert_eq!(&rows[0][column("amount_base_units")], "100000000");
    assert_eq!(&rows[0][column("state")], "created");

    let ledger = viewer
        .get(&format!(
            "/dashboard/export.csv?what=ledger&from={day}&to={day}"
        ))
        .await;
    assert_eq!(ledger.status, 200);
    assert_eq!(ledger.body.lines().count(), 1, "a header, nothing booked");
    let bad = viewer
        .get("/dashboard/export.csv?what=payments&from=2026-12-31&to=2026-12-01")
        .await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.body.contains("to: must not be before from"),
        "{}",
        bad.body
    );
}
