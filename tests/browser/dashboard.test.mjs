// The dashboard in a real browser (docs/dashboard.md): Debian's Chromium driven by playwright-core,
// against the payments-api binary, anvil and PostgreSQL. People are invited by the CLI and set
// their passwords through the page; each role signs in and walks every page; axe-core checks each
// page; attacks are tried the way a browser would carry them (a form on another site, markup in
// stored text). Screenshots of every page in both languages go to target/browser/dashboard-*.png.
//
// Needs: PAYMENTS_API_BIN, TEST_DATABASE_URL and CHROMIUM, as checkout.test.mjs.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, existsSync } from "node:fs";
import { createServer } from "node:http";
import { createRequire } from "node:module";
import path from "node:path";
import { chromium } from "playwright-core";
import { parse as parseCsv } from "csv-parse/sync";
import { Webhook } from "standardwebhooks";
import { root, until, startChain, startApi, PAYER, MERCHANT, DEVNET_USD, freePort } from "../node/stack.mjs";
import { withWallet } from "./wallet.mjs";

const shots = path.join(root, "target/browser");
mkdirSync(shots, { recursive: true });
const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const PASSWORD = "correct horse battery staple";

let chain, api, base, browser;
const merchant = (method, route, body, key) => api.merchant(method, route, body, key);

async function createIntent({ metadata, amount = "25000000" } = {}) {
  const { status, body } = await merchant("POST", "/v1/payment_intents", {
    chain: "evm:31337", token: DEVNET_USD, payer: PAYER, merchant: MERCHANT, amount, expires_in_seconds: 900, metadata,
  }, `order-${Math.random()}`);
  assert.equal(status, 201, JSON.stringify(body));
  return body;
}

/// Pays an intent as its payer would through the API: the authorization signed by anvil's key.
async function pay(intent) {
  const { body: authorization } = await merchant("GET", `/v1/payment_intents/${intent.id}/authorization`);
  const signature = await chain.rpc("eth_signTypedData_v4", [PAYER, JSON.stringify(authorization.typed_data)]);
  const confirmed = await merchant("POST", `/v1/payment_intents/${intent.id}/confirm`, { signature }, `confirm-${intent.id}`);
  assert.equal(confirmed.status, 200, JSON.stringify(confirmed.body));
  await until("the payment to succeed", async () => {
    await chain.rpc("evm_mine", []);
    return (await merchant("GET", `/v1/payment_intents/${intent.id}`)).body.state === "succeeded";
  });
}

/// A person invited by `payments-api users create` who sets a password through the link's page.
async function invite(email, role, { language = "en-US" } = {}) {
  const link = api.command(["users", "create", "--merchant", "merchant_demo", "--email", email, "--role", role]);
  assert.match(link, /\/dashboard\/password\?token=[0-9a-f]{64}$/);
  const { page, context } = await newPage({ language });
  await page.goto(link);
  await page.getByLabel(/^(Password|密碼)$/).fill(PASSWORD);
  await page.getByRole("button", { name: /^(Save|儲存)$/ }).click();
  await page.getByRole("status").waitFor();
  await context.close();
  return email;
}

async function newPage({ language = "en-US", viewport = { width: 1280, height: 900 } } = {}) {
  const context = await browser.newContext({ locale: language, extraHTTPHeaders: { "Accept-Language": language }, viewport });
  return { context, page: await context.newPage() };
}

async function signIn(email, { wallet, ...options } = {}) {
  const { page, context } = await newPage(options);
  if (wallet) await withWallet(context, (method, params) => chain.rpc(method, params), wallet);
  await page.goto(`${base}/dashboard/login`);
  await page.getByLabel(/^(Email|電子郵件)$/).fill(email);
  await page.getByLabel(/^(Password|密碼)$/).fill(PASSWORD);
  await page.getByRole("button", { name: /^(Sign in|登入)$/ }).click();
  await page.waitForURL(`${base}/dashboard/payments`);
  return { page, context };
}

async function accessible(page, what) {
  await page.evaluate(axeSource);
  const results = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
  const serious = results.violations.filter((v) => ["serious", "critical"].includes(v.impact));
  assert.deepEqual(serious.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target).join(", ")})`), [], `axe on ${what}`);
}

/// Checks the page the way every page must be (one h1 that its title repeats, the navigation
/// landmark, axe), then screenshots it in the language it is in and in the other one.
async function walk(page, name, heading) {
  const h1 = page.locator("h1");
  assert.equal(await h1.count(), 1, `one h1 on ${name}`);
  const text = (await h1.textContent()).trim();
  if (heading) assert.match(text, heading);
  assert.ok((await page.title()).startsWith(text), `the title of ${name} says where it is`);
  await accessible(page, name);
  const shown = await page.locator("html").getAttribute("lang");
  await page.screenshot({ path: path.join(shots, `dashboard-${name}-${shown}.png`), fullPage: true });
  const other = shown === "zh-TW" ? "en" : "zh-TW";
  await page.locator(`a.language[lang="${other}"]`).click();
  await until(`${name} in ${other}`, async () => (await page.locator("html").getAttribute("lang")) === other);
  await accessible(page, `${name} (${other})`);
  await page.screenshot({ path: path.join(shots, `dashboard-${name}-${other}.png`), fullPage: true });
  await page.locator(`a.language[lang="${shown}"]`).click();
  await until(`${name} in ${shown}`, async () => (await page.locator("html").getAttribute("lang")) === shown);
}

let paid, open, hostile;

before(async () => {
  assert.ok(existsSync(chromiumPath), `${chromiumPath} is missing: apt-get install chromium`);
  chain = await startChain();
  // Webhooks to a receiver on this machine; a delivery fails at its first failed attempt, so the
  // suite can resend one without waiting out three days of retries.
  api = await startApi("dashboard", chain, {
    WEBHOOK_ALLOW_HTTP: "true", WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true", WEBHOOK_RETRY_FOR_SECONDS: "0",
  });
  base = api.base;
  browser = await chromium.launch({
    executablePath: chromiumPath,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  await invite("owner@kaffa.example", "owner");
  await invite("dev@kaffa.example", "developer");
  await invite("viewer@kaffa.example", "viewer", { language: "zh-TW" });
  paid = await createIntent({ metadata: { order: "A-1001" } });
  await pay(paid);
  open = await createIntent({ metadata: { order: "A-1002" } });
  hostile = await createIntent({ metadata: { note: "<script>window.__xss = 1</script><img src=x onerror=\"window.__xss = 1\">" } });
});

after(async () => {
  await browser?.close();
  api?.stop();
  chain?.stop();
});

test("an owner walks every page in both languages, on a desktop and a phone, and cancels a payment", async () => {
  const { page: login, context: first } = await newPage();
  await login.goto(`${base}/dashboard/login`);
  await walk(login, "sign-in", /^Sign in$/);
  await first.close();

  const { page, context } = await signIn("owner@kaffa.example");
  await walk(page, "payments", /^Payments$/);
  await page.getByRole("link", { name: paid.id }).click();
  await page.getByText("Chain transactions").waitFor();
  const ledger = page.locator("table").filter({ hasText: "merchant:merchant_demo" });
  assert.equal(await ledger.count(), 1, "the payment's ledger entry");
  assert.ok(await page.getByText("25.00 dUSD").first().isVisible(), "the amount in the token's units");
  await walk(page, "payment", /^Payment pi_/);
  for (const [name, section, heading] of [
    ["balances", "Balances", /^Balances$/],
    ["webhooks", "Webhooks", /^Webhooks$/],
    ["api-keys", "API keys", /^API keys$/],
    ["team", "Team", /^Team$/],
    ["settings", "Settings", /^Settings$/],
    ["export", "Export", /^Export$/],
    ["audit", "Audit log", /^Audit log$/],
  ]) {
    await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: section }).click();
    await walk(page, name, heading);
  }

  await page.goto(`${base}/dashboard/balances`);
  await page.getByText("25.00 dUSD").waitFor();

  await page.goto(`${base}/dashboard/payments/${open.id}`);
  await page.getByRole("button", { name: "Cancel this payment" }).click();
  await page.getByRole("status").waitFor();
  assert.equal((await merchant("GET", `/v1/payment_intents/${open.id}`)).body.state, "canceled");
  await page.goto(`${base}/dashboard/audit`);
  await page.getByText("payment_intent.cancel").waitFor();

  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${base}/dashboard/payments`);
  await accessible(page, "payments on a phone");
  await page.screenshot({ path: path.join(shots, "dashboard-payments-phone-en.png"), fullPage: true });
  await context.close();
});

/// Every page of the navigation, as `page`'s person sees it: one h1, axe clean.
async function walkAll(page, who) {
  const links = page.getByRole("navigation", { name: /^(Main|主選單)$/ }).getByRole("link");
  const paths = await links.evaluateAll((all) => all.map((a) => a.getAttribute("href")));
  assert.equal(paths.length, 8, `${who} sees every section`);
  for (const path of paths) {
    const response = await page.goto(`${base}${path}`);
    assert.equal(response.status(), 200, `${who} reads ${path}`);
    assert.equal(await page.locator("h1").count(), 1);
    await accessible(page, `${path} as ${who}`);
  }
}

test("a viewer reads every page in Traditional Chinese and is refused a cancel and a refund posted with its own token", async () => {
  const { page, context } = await signIn("viewer@kaffa.example", { language: "zh-TW" });
  assert.equal(await page.locator("html").getAttribute("lang"), "zh-TW");
  await walkAll(page, "a viewer");
  await page.goto(`${base}/dashboard/payments/${hostile.id}`);
  assert.equal(await page.getByRole("button", { name: "取消此付款" }).count(), 0, "no Cancel for a viewer");
  const csrf = await page.locator('input[name="csrf"]').first().inputValue();
  const refused = await page.request.post(`${base}/dashboard/payments/${hostile.id}/cancel`, { form: { csrf }, maxRedirects: 0 });
  assert.equal(refused.status(), 403);
  assert.equal((await merchant("GET", `/v1/payment_intents/${hostile.id}`)).body.state, "created");
  await page.goto(`${base}/dashboard/payments/${paid.id}`);
  assert.equal(await page.getByRole("button", { name: "退款", exact: true }).count(), 0, "no Refund for a viewer");
  const refund = await page.request.post(`${base}/dashboard/payments/${paid.id}/refunds`,
    { form: { csrf, form: "0123456789abcdef0123456789abcdef", amount: "1" }, maxRedirects: 0 });
  assert.equal(refund.status(), 403);
  const { body } = await merchant("GET", `/v1/refunds?payment_intent=${paid.id}`);
  assert.equal(body.data.length, 0, "no refund was made");
  await context.close();
});

test("a developer reads every page; a session id planted before sign-in is never adopted", async () => {
  const { page, context } = await newPage();
  const planted = "a".repeat(64);
  await context.addCookies([{ name: "dashboard_session", value: planted, url: `${base}/dashboard` }]);
  await page.goto(`${base}/dashboard/payments`);
  await page.waitForURL(`${base}/dashboard/login`);
  await page.getByLabel("Email").fill("dev@kaffa.example");
  await page.getByLabel("Password").fill(PASSWORD);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(`${base}/dashboard/payments`);
  const session = (await context.cookies(`${base}/dashboard`)).find((c) => c.name === "dashboard_session");
  assert.ok(session && session.value !== planted, "a new session id at sign-in");
  assert.equal(session.httpOnly, true);
  assert.equal(session.sameSite, "Strict");
  await walkAll(page, "a developer");
  await context.close();
});

test("stored markup in metadata and the display name is shown as text and never runs; no page can be framed", async () => {
  const { page, context } = await signIn("owner@kaffa.example");
  const response = await page.goto(`${base}/dashboard/payments/${hostile.id}`);
  assert.match(response.headers()["content-security-policy"], /frame-ancestors 'none'/);
  assert.equal(response.headers()["x-frame-options"], "DENY");
  await page.getByText("<script>window.__xss = 1</script>", { exact: false }).waitFor();
  assert.equal(await page.evaluate(() => window.__xss), undefined, "the stored script did not run");
  await page.goto(`${base}/dashboard/settings`);
  await page.getByLabel("Display name").fill("<img src=x onerror=\"window.__xss = 1\">Kaffa");
  await page.getByRole("button", { name: "Save" }).click();
  await page.getByRole("status").waitFor();
  assert.equal(await page.getByLabel("Display name").inputValue(), "<img src=x onerror=\"window.__xss = 1\">Kaffa");
  assert.equal(await page.evaluate(() => window.__xss), undefined, "the stored display name did not run");
  assert.equal(await page.locator("img").count(), 0, "the display name is text, not an element");
  await context.close();
});

test("a form on another site cannot cancel a payment, and a revoked key is refused within a second", async () => {
  const target = await createIntent();
  const { page, context } = await signIn("owner@kaffa.example");
  // Another origin, as an attacker's page: a form that posts to the dashboard as soon as it loads.
  const port = await freePort();
  const site = createServer((_, response) => {
    response.setHeader("content-type", "text/html");
    response.end(`<!doctype html><form id=f method=post action="${base}/dashboard/payments/${target.id}/cancel">
      <input name=csrf value=guess></form><script>document.getElementById("f").submit()</script>`);
  }).listen(port, "127.0.0.1");
  try {
    await page.goto(`http://localhost:${port}/`);
    await page.waitForURL(/\/dashboard\/login$/);
  } finally {
    site.close();
  }
  assert.equal((await merchant("GET", `/v1/payment_intents/${target.id}`)).body.state, "created");
  await context.close();

  const developer = await signIn("dev@kaffa.example");
  await developer.page.goto(`${base}/dashboard/api-keys`);
  await developer.page.getByRole("button", { name: "Create a key" }).click();
  const secret = (await developer.page.locator("code.secret").textContent()).trim();
  assert.match(secret, /^sk_live_[0-9a-f]{64}$/);
  const listing = async () => fetch(`${base}/v1/payment_intents`, { headers: { authorization: `Bearer ${secret}` } });
  assert.equal((await listing()).status, 200);
  await developer.page.goto(`${base}/dashboard/api-keys`);
  assert.equal(await developer.page.getByText(secret).count(), 0, "the secret is shown once");
  await developer.page.getByRole("button", { name: `Revoke ${secret.slice(0, 16)}` }).click();
  const revokedAt = Date.now();
  await until("the key to be refused", async () => (await listing()).status === 401, 1500);
  assert.ok(Date.now() - revokedAt < 1500);
  await developer.context.close();
});

test("an owner refunds part of a paid intent, signed in the browser by the paid address's wallet", async () => {
  const refunded = await createIntent({ metadata: { order: "A-1003" } });
  await pay(refunded);
  const before = chain.balanceOf(DEVNET_USD, PAYER);
  const { page, context } = await signIn("owner@kaffa.example", { wallet: { account: MERCHANT, chainId: "0x1" } });
  await page.goto(`${base}/dashboard/payments/${refunded.id}`);
  await page.getByLabel("Amount to refund").fill("10.5");
  await page.getByRole("button", { name: "Refund", exact: true }).click();
  await page.waitForURL(/\/dashboard\/refunds\/re_[0-9a-f]{24}$/);
  await walk(page, "refund", /^Refund re_/);
  await page.getByRole("button", { name: "Sign with your wallet" }).click();
  await page.getByText("processing").first().waitFor();
  const id = page.url().split("/").pop();
  await until("the refund to succeed", async () => {
    await chain.rpc("evm_mine", []);
    return (await merchant("GET", `/v1/refunds/${id}`)).body.state === "succeeded";
  });
  assert.equal(chain.balanceOf(DEVNET_USD, PAYER) - before, 10500000n);
  await page.reload();
  await page.getByText("succeeded").first().waitFor();
  await page.screenshot({ path: path.join(shots, "dashboard-refund-succeeded-en.png"), fullPage: true });
  // The same form sent again (a double click, a resubmitted page) makes no second refund.
  await page.goto(`${base}/dashboard/payments/${refunded.id}`);
  const form = page.locator('form[action$="/refunds"]');
  const fields = { csrf: await form.locator('input[name="csrf"]').inputValue(), form: await form.locator('input[name="form"]').inputValue(), amount: "1" };
  const first = await page.request.post(`${base}/dashboard/payments/${refunded.id}/refunds`, { form: fields, maxRedirects: 0 });
  const second = await page.request.post(`${base}/dashboard/payments/${refunded.id}/refunds`, { form: fields, maxRedirects: 0 });
  assert.equal(first.status(), 303);
  assert.equal(second.headers().location, first.headers().location, "the second submit shows the first one's refund");
  const { body } = await merchant("GET", `/v1/refunds?payment_intent=${refunded.id}`);
  assert.equal(body.data.length, 2, JSON.stringify(body));
  await context.close();
});

test("a developer resends a failed delivery to a real receiver, which verifies it; an owner exports payments and sets the accepted assets", async () => {
  // A receiver that refuses until told otherwise, keeping every request it was sent.
  const received = [];
  let answer = 500;
  const port = await freePort();
  const receiver = createServer((request, response) => {
    const chunks = [];
    request.on("data", (c) => chunks.push(c));
    request.on("end", () => {
      received.push({ headers: request.headers, body: Buffer.concat(chunks).toString("utf8") });
      response.statusCode = answer;
      response.end();
    });
  }).listen(port, "127.0.0.1");
  try {
    const { page, context } = await signIn("dev@kaffa.example");
    await page.goto(`${base}/dashboard/webhooks`);
    await page.getByLabel("URL").fill(`http://127.0.0.1:${port}/hooks`);
    await page.getByRole("button", { name: "Add endpoint" }).click();
    const secret = (await page.locator("code.secret").textContent()).trim();
    assert.match(secret, /^whsec_/);
    await page.getByRole("link", { name: `http://127.0.0.1:${port}/hooks` }).click();
    await page.getByRole("button", { name: "Send test event" }).click();
    await page.getByRole("status").waitFor();
    await until("the receiver to refuse the test event", async () => received.length === 1);
    const event = JSON.parse(received[0].body);
    assert.equal(event.type, "webhook_endpoint.test");
    const resend = page.getByRole("button", { name: `Resend ${event.id}` });
    await until("the delivery to be shown failed", async () => {
      await page.reload();
      return (await resend.count()) === 1;
    });
    assert.equal(await page.getByRole("cell", { name: "500", exact: true }).count(), 1, "the receiver's answer is shown");
    await walk(page, "endpoint", /^http:\/\/127\.0\.0\.1/);
    answer = 204;
    await resend.click();
    await page.getByRole("status").waitFor();
    await until("the resent delivery to arrive", async () => received.length === 2);
    assert.equal(received[1].headers["webhook-id"], received[0].headers["webhook-id"], "resent as the same message");
    const verified = new Webhook(secret).verify(received[1].body, received[1].headers);
    assert.equal(verified.id, event.id);
    await until("the delivery to be shown delivered", async () => {
      await page.reload();
      return (await resend.count()) === 0 && (await page.getByText("delivered").count()) > 0;
    });
    await context.close();
  } finally {
    receiver.close();
  }

  const { page, context } = await signIn("owner@kaffa.example");
  await page.goto(`${base}/dashboard/export`);
  await page.getByLabel("What").selectOption("payments");
  const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("button", { name: "Download CSV" }).click()]);
  assert.match(download.suggestedFilename(), /\.csv$/);
  const rows = parseCsv(readFileSync(await download.path(), "utf8"), { columns: true });
  const row = rows.find((r) => r.id === paid.id);
  assert.ok(row, `${paid.id} is in the export`);
  assert.equal(row.state, "succeeded");
  assert.equal(row.amount, "25.00");
  assert.equal(row.amount_base_units, "25000000");
  assert.match(row.transaction_hash, /^0x[0-9a-f]{64}$/);

  await page.goto(`${base}/dashboard/settings`);
  await page.getByLabel("Payout address").fill(MERCHANT.toLowerCase());
  await page.getByRole("button", { name: "Save" }).click();
  await page.getByRole("status").waitFor();
  assert.equal(await page.getByLabel("Payout address").inputValue(), MERCHANT, "stored checksummed");
  await page.getByLabel("Token contract address").fill(DEVNET_USD);
  await page.getByLabel("Currency").selectOption("usd");
  await page.getByRole("button", { name: "Add asset" }).click();
  await page.getByRole("status").waitFor();
  const accepted = (await merchant("GET", "/v1/merchant")).body;
  assert.equal(accepted.payout_address, MERCHANT);
  assert.deepEqual(accepted.accepted_assets.map((a) => [a.chain, a.token, a.currency]), [["evm:31337", DEVNET_USD, "usd"]]);
  await walk(page, "settings-assets", /^Settings$/);
  await page.getByRole("button", { name: "Remove dUSD evm:31337 USD" }).click();
  await page.getByRole("status").waitFor();
  assert.deepEqual((await merchant("GET", "/v1/merchant")).body.accepted_assets, []);
  await page.goto(`${base}/dashboard/audit`);
  await page.getByText("merchant.accepted_asset.remove").waitFor();
  await page.getByText("merchant.payout_address").waitFor();
  await context.close();
});
