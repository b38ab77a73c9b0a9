// The checkout page in a real browser (docs/checkout.md): Debian's Chromium driven by
// playwright-core, against the payments-api binary, anvil and PostgreSQL. A test wallet is injected
// before the page loads: an EIP-6963 provider whose requests the test answers, signing with
// anvil's dev accounts (anvil's own eth_signTypedData_v4). axe-core checks accessibility.
// Screenshots of each state, in both languages, go to target/browser/<state>-<language>.png.
//
// Needs: PAYMENTS_API_BIN (a payments-api binary), TEST_DATABASE_URL (a PostgreSQL server to create
// a database on) and CHROMIUM (default /usr/bin/chromium). `make browser-test` sets them.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { root, tools, until, startChain, startApi, PAYER, PAYER_KEY, MERCHANT, STRANGER, DEVNET_USD, USDC } from "../node/stack.mjs";
import { withWallet } from "./wallet.mjs";

const shots = path.join(root, "target/browser");
mkdirSync(shots, { recursive: true });
const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";

let chain, api, base, browser;
const rpc = (method, params) => chain.rpc(method, params);
const balanceOf = (token, address) => chain.balanceOf(token, address);
const merchant = (method, route, body, key) => api.merchant(method, route, body, key);

async function createIntent({ token = DEVNET_USD, amount = "25000000", expires = 900 } = {}) {
  const { status, body } = await merchant("POST", "/v1/payment_intents", {
    chain: "evm:31337", token, payer: PAYER, merchant: MERCHANT, amount, expires_in_seconds: expires,
  });
  assert.equal(status, 201, JSON.stringify(body));
  assert.ok(body.checkout_url.startsWith(`${base}/checkout/${body.id}#`), body.checkout_url);
  return body;
}

before(async () => {
  assert.ok(existsSync(chromiumPath), `${chromiumPath} is missing: apt-get install chromium`);
  chain = await startChain();
  api = await startApi("checkout", chain);
  base = api.base;
  const named = await merchant("POST", "/v1/merchant", { display_name: "Kaffa Coffee Roasters" });
  assert.equal(named.status, 200, JSON.stringify(named.body));

  browser = await chromium.launch({
    executablePath: chromiumPath,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await browser?.close();
  api?.stop();
  chain?.stop();
});

// ---- the test wallet -------------------------------------------------------------------------

/// A browser page with a test wallet (wallet.mjs): `account` signs (anvil's own key for it), the
/// wallet starts on `chainId` and switches when asked; `reject` declines every signature.
async function walletPage({ account = PAYER, chainId = "0x1", reject = false, language = "en-US" } = {}) {
  const context = await browser.newContext({ locale: language, extraHTTPHeaders: { "Accept-Language": language }, viewport: { width: 1280, height: 900 } });
  const wallet = await withWallet(context, rpc, { account, chainId, reject });
  const page = await context.newPage();
  return { page, wallet, context };
}

const status = (page) => page.locator('[role="status"]');

/// A screenshot of the page as it is, then the same state in the other language (by the page's
/// own switch, and back), so every state is seen in English and in Traditional Chinese.
async function shot(page, name) {
  const shown = await page.locator("html").getAttribute("lang");
  const other = shown === "zh-TW" ? "en" : "zh-TW";
  await page.screenshot({ path: path.join(shots, `${name}-${shown}.png`), fullPage: true });
  await page.locator(`[data-lang="${other}"]`).click();
  await until(`the page in ${other}`, async () => (await page.locator("html").getAttribute("lang")) === other);
  await page.screenshot({ path: path.join(shots, `${name}-${other}.png`), fullPage: true });
  await page.locator(`[data-lang="${shown}"]`).click();
  await until(`the page in ${shown}`, async () => (await page.locator("html").getAttribute("lang")) === shown);
}

async function accessible(page, what) {
  await page.evaluate(axeSource);
  const results = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
  const serious = results.violations.filter((v) => ["serious", "critical"].includes(v.impact));
  assert.deepEqual(serious.map((v) => `${v.id}: ${v.help}`), [], `axe on ${what}`);
}

async function payThrough(page, intent) {
  await page.goto(intent.checkout_url);
  await page.getByRole("button", { name: /Connect wallet|連接錢包/ }).click();
  const pay = page.getByRole("button", { name: /^(Pay|支付)/ });
  await pay.waitFor();
  await until("Pay to be enabled", () => pay.isEnabled());
  await pay.click();
}

// ---- scenarios -------------------------------------------------------------------------------

test("a payer pays in DevnetUSD, the wallet switched to the chain, and sees succeeded with the hash", async () => {
  const intent = await createIntent();
  const before = balanceOf(DEVNET_USD, MERCHANT);
  const { page, wallet, context } = await walletPage();
  const response = await page.goto(intent.checkout_url);
  const headers = response.headers();
  assert.match(headers["content-security-policy"], /frame-ancestors 'none'/);
  assert.match(headers["content-security-policy"], /script-src 'self'/);
  assert.equal(headers["x-frame-options"], "DENY");
  assert.equal(headers["referrer-policy"], "no-referrer");
  await page.getByText("Kaffa Coffee Roasters").waitFor();
  await until("the amount", async () => (await page.locator("#amount").textContent()) === "25.00");
  assert.equal(await page.locator("#symbol").textContent(), "dUSD");
  await accessible(page, "the created page (en)");
  await shot(page, "created");
  await page.getByRole("button", { name: "Connect wallet" }).click();
  const pay = page.getByRole("button", { name: "Pay 25.00 dUSD" });
  await until("Pay enabled", () => pay.isEnabled());
  assert.deepEqual(wallet.switched, ["0x7a69"], "the wallet was switched to chain 31337");
  await shot(page, "connected");
  await pay.click();
  await until("succeeded", async () => /Paid\. Transaction 0x[0-9a-f]{64}/.test(await status(page).textContent()));
  assert.equal(balanceOf(DEVNET_USD, MERCHANT) - before, 25000000n);
  const { body } = await merchant("GET", `/v1/payment_intents/${intent.id}`);
  assert.equal(body.state, "succeeded");
  assert.ok((await status(page).textContent()).includes(body.settlement.transaction_hash));
  await accessible(page, "the succeeded page (en)");
  await shot(page, "succeeded");
  await context.close();
});

test("a payer pays in USDC, in Traditional Chinese, on a phone", async () => {
  const intent = await createIntent({ token: USDC, amount: "12500000" });
  const before = balanceOf(USDC, MERCHANT);
  const { page, context } = await walletPage({ language: "zh-TW", chainId: "0x7a69" });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(intent.checkout_url);
  assert.equal(await page.locator("html").getAttribute("lang"), "zh-TW");
  await page.getByText("付款給").waitFor();
  await until("the amount", async () => (await page.locator("#amount").textContent()) === "12.50");
  assert.equal(await page.locator("#symbol").textContent(), "USDC");
  await accessible(page, "the created page (zh-TW)");
  await shot(page, "created-usdc-phone");
  await page.getByRole("button", { name: "連接錢包" }).click();
  const pay = page.getByRole("button", { name: "支付 12.50 USDC" });
  await until("Pay enabled", () => pay.isEnabled());
  await pay.click();
  await until("succeeded", async () => (await status(page).textContent()).startsWith("已付款"));
  assert.equal(balanceOf(USDC, MERCHANT) - before, 12500000n);
  await accessible(page, "the succeeded page (zh-TW)");
  await shot(page, "succeeded-usdc-phone");
  // The switch: the same page in English.
  await page.getByRole("button", { name: "EN" }).click();
  await until("English", async () => (await status(page).textContent()).startsWith("Paid."));
  await context.close();
});

test("a wallet on another account is told plainly and cannot pay", async () => {
  const intent = await createIntent();
  const { page, context } = await walletPage({ account: STRANGER });
  await page.goto(intent.checkout_url);
  await page.getByRole("button", { name: "Connect wallet" }).click();
  await page.getByText(/must come from 0x7099…79C8/).waitFor();
  assert.equal(await page.getByRole("button", { name: /^Pay/ }).isDisabled(), true);
  await shot(page, "wrong-account");
  await context.close();
});

test("a rejected signature changes nothing and says so", async () => {
  const intent = await createIntent();
  const { page, context } = await walletPage({ reject: true, language: "zh-TW" });
  await payThrough(page, intent);
  await until("the rejection said", async () => (await status(page).textContent()).includes("拒絕了簽署"));
  const { body } = await merchant("GET", `/v1/payment_intents/${intent.id}`);
  assert.equal(body.state, "created");
  await shot(page, "rejected");
  await context.close();
});

test("an expired intent says it expired, and cannot be paid", async () => {
  const intent = await createIntent({ expires: 60 });
  const { page, context } = await walletPage();
  // The chain's time passes the authorization's validBefore; the follower expires the intent.
  await rpc("evm_increaseTime", [120]);
  await rpc("evm_mine");
  await until("expired", async () => (await merchant("GET", `/v1/payment_intents/${intent.id}`)).body.state === "canceled");
  await page.goto(intent.checkout_url);
  await until("expired shown", async () => (await status(page).textContent()) === "This payment request expired.");
  assert.equal(await page.getByRole("button", { name: "Connect wallet" }).isHidden(), true);
  await accessible(page, "the expired page");
  await shot(page, "expired");
  await context.close();
});

test("a page reloaded mid-payment shows the true state", async () => {
  const intent = await createIntent();
  const { page, context } = await walletPage({ chainId: "0x7a69" });
  // Blocks wait for the test: the relayer's transaction stays pending, the intent processing.
  await rpc("evm_setAutomine", [false]);
  try {
    await payThrough(page, intent);
    await until("processing", async () => (await merchant("GET", `/v1/payment_intents/${intent.id}`)).body.state === "processing");
    await page.reload();
    await until("processing after the reload", async () => /^Payment sent/.test(await status(page).textContent()));
    await shot(page, "processing");
    await until("the relayer's transaction", async () => (await rpc("txpool_status")).pending !== "0x0");
    await rpc("evm_mine");
  } finally {
    await rpc("evm_setAutomine", [true]);
  }
  await until("succeeded after the reload", async () => /^Paid\./.test(await status(page).textContent()));
  await context.close();
});

test("a confirm whose answer is lost is retried with the same key and pays once", async () => {
  const intent = await createIntent({ amount: "3000000" });
  const before = balanceOf(DEVNET_USD, MERCHANT);
  const { page, context } = await walletPage({ chainId: "0x7a69" });
  const keys = [];
  let dropped = 0;
  // The first confirm reaches the server, which commits it; its answer never reaches the page.
  await page.route("**/v1/checkout/*/confirm", async (route) => {
    keys.push(route.request().headers()["idempotency-key"]);
    if (dropped++ === 0) {
      await route.fetch();
      await route.abort("connectionreset");
    } else {
      await route.continue();
    }
  });
  await payThrough(page, intent);
  await until("succeeded", async () => /^Paid\./.test(await status(page).textContent()));
  await until("the page to send the confirm again", () => keys.length >= 2);
  assert.equal(new Set(keys).size, 1, "with the same Idempotency-Key");
  assert.equal(balanceOf(DEVNET_USD, MERCHANT) - before, 3000000n);
  const { body } = await merchant("GET", `/v1/payment_intents/${intent.id}`);
  assert.equal(body.version, 3, "confirmed once");
  await context.close();
});

test("two tabs paying at once pay once", async () => {
  const intent = await createIntent({ amount: "7000000" });
  const before = balanceOf(DEVNET_USD, MERCHANT);
  const first = await walletPage({ chainId: "0x7a69" });
  const second = await walletPage({ chainId: "0x7a69" });
  for (const { page } of [first, second]) {
    await page.goto(intent.checkout_url);
    await page.getByRole("button", { name: "Connect wallet" }).click();
    await until("Pay enabled", () => page.getByRole("button", { name: /^Pay/ }).isEnabled());
  }
  await Promise.all([first, second].map(({ page }) => page.getByRole("button", { name: /^Pay/ }).click()));
  for (const { page } of [first, second]) {
    await until("succeeded in both tabs", async () => /^Paid\./.test(await status(page).textContent()));
  }
  assert.equal(balanceOf(DEVNET_USD, MERCHANT) - before, 7000000n, "paid once");
  const { body } = await merchant("GET", `/v1/payment_intents/${intent.id}`);
  assert.equal(body.version, 3, "created, processing, succeeded: one confirm");
  await first.context.close();
  await second.context.close();
});

test("a client secret opens its own intent's checkout only, and never reaches the log", async () => {
  const one = await createIntent();
  const other = await createIntent();
  const secret = one.client_secret;
  const bearer = { Authorization: `Bearer ${secret}` };
  assert.equal((await fetch(`${base}/v1/checkout/${one.id}`, { headers: bearer })).status, 200);
  const view = await (await fetch(`${base}/v1/checkout/${one.id}`, { headers: bearer })).json();
  assert.equal(view.metadata, undefined);
  assert.equal(view.client_secret, undefined);
  for (const route of [`/v1/checkout/${other.id}`, `/v1/checkout/${other.id}/authorization`]) {
    assert.equal((await fetch(`${base}${route}`, { headers: bearer })).status, 404, route);
  }
  const foreign = await fetch(`${base}/v1/checkout/${other.id}/confirm`, {
    method: "POST", headers: { ...bearer, "content-type": "application/json" }, body: JSON.stringify({ signature: `0x${"11".repeat(65)}` }),
  });
  assert.equal(foreign.status, 404);
  for (const route of [`/v1/payment_intents/${one.id}`, "/v1/payment_intents", "/v1/balances"]) {
    assert.equal((await fetch(`${base}${route}`, { headers: bearer })).status, 401, route);
  }
  // Confirms are limited per intent: the eleventh in a minute is 429, with Retry-After.
  let limited = null;
  for (let i = 0; i < 12 && !limited; i++) {
    const answer = await fetch(`${base}/v1/checkout/${other.id}/confirm`, {
      method: "POST",
      headers: { Authorization: `Bearer ${other.client_secret}`, "content-type": "application/json", "Idempotency-Key": `bad-${i}` },
      body: JSON.stringify({ signature: `0x${"11".repeat(65)}` }),
    });
    if (answer.status === 429) limited = answer;
    else assert.equal(answer.status, 400);
  }
  assert.ok(limited, "the confirms were rate limited");
  assert.ok(Number(limited.headers.get("retry-after")) >= 1);
  // The page a payer opened sent the secret in a header only: no log line holds it.
  const { page, context } = await walletPage();
  await page.goto(one.checkout_url);
  await page.getByText("Kaffa Coffee Roasters").waitFor();
  await context.close();
  assert.ok(api.log().includes(`/checkout/${one.id}`) || api.log().includes("/v1/checkout/{id}"), "the log has the requests");
  assert.ok(!api.log().includes(secret.split("_secret_")[1]), "the client secret is not in the log");
});

test("a deposit intent shows its address, the exact amount and a QR code, and follows what arrives", async () => {
  // Its own server, waiting for three confirmations, so the page can show them.
  const deposits = await startApi("checkout_deposit", chain, {
    CHAIN_CONFIRMATIONS: "3",
    DEPOSIT_FACTORIES: "evm:31337=0x0116686E2291dbd5e317F47faDBFb43B599786Ef",
  });
  try {
    const created = await deposits.merchant("POST", "/v1/payment_intents", {
      chain: "evm:31337", token: DEVNET_USD, merchant: MERCHANT, amount: "25000000", payment_method: "deposit_address",
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const intent = created.body;
    const before = balanceOf(DEVNET_USD, MERCHANT);
    // A plain ERC-20 transfer from the payer's wallet, as any wallet or exchange sends it.
    const send = (amount) => rpc("eth_sendTransaction", [{
      from: PAYER,
      to: DEVNET_USD,
      data: `0xa9059cbb${intent.deposit_address.slice(2).toLowerCase().padStart(64, "0")}${BigInt(amount).toString(16).padStart(64, "0")}`,
    }]);
    const { page, context } = await walletPage({ language: "zh-TW" });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(intent.checkout_url);
    await page.locator("#deposit-address", { hasText: intent.deposit_address }).waitFor();
    // On a phone the address breaks in its middle, each half whole on its line.
    assert.deepEqual(
      await page.locator("#deposit-address span").evaluateAll((halves) => halves.map((h) => h.getClientRects().length)),
      [1, 1],
    );
    await page.getByText(/剛好 25\.00 dUSD/).waitFor();
    await until("the QR code drawn", () => page.locator("#qr").evaluate((img) => img.complete && img.naturalWidth > 0));
    assert.equal(
      await page.locator("#qr").getAttribute("alt"),
      `ethereum:${DEVNET_USD}@31337/transfer?address=${intent.deposit_address}&uint256=25000000`,
    );
    assert.equal(await page.locator("#payer-row").isHidden(), true, "no payer to show");
    assert.equal(await page.getByRole("button", { name: "連接錢包" }).isHidden(), true, "no wallet needed");
    await accessible(page, "the deposit page (zh-TW)");
    await shot(page, "deposit");

    // Part of it: seen, then confirmed; the rest is asked for, by a new code.
    await send("10000000");
    // Seen, and not yet confirmed: one or two of three confirmations (whatever else was mined).
    await until("the transfer seen", async () => /[12]／3/.test(await page.locator("#progress").textContent()));
    await shot(page, "deposit-confirming");
    await rpc("anvil_mine", ["0x2"]);
    await until("partially paid", async () => (await status(page).textContent()).includes("已收到 10.00 dUSD"));
    await until("the code asks for the rest", async () => (await page.locator("#qr").getAttribute("alt")).endsWith("uint256=15000000"));
    await accessible(page, "the partially paid page (zh-TW)");
    await shot(page, "deposit-partial");

    // The rest and a little more: paid, the excess said; the sweep reaches the merchant.
    await send("15500000");
    await rpc("anvil_mine", ["0x2"]);
    await until("paid", async () => (await status(page).textContent()).startsWith("已付款，比要求多了 0.50 dUSD"));
    assert.equal(await page.locator("#deposit").isHidden(), true);
    await shot(page, "deposit-paid");
    await until("swept to the merchant", async () => {
      await rpc("anvil_mine", ["0x1"]);
      return balanceOf(DEVNET_USD, MERCHANT) - before === 25500000n;
    });
    const { body } = await deposits.merchant("GET", `/v1/payment_intents/${intent.id}`);
    assert.equal(body.state, "succeeded");
    assert.equal(body.amount_received, "25500000");
    assert.equal(body.amount_overpaid, "500000");
    await context.close();
  } finally {
    deposits.stop();
  }
});

test("an order lists its options; the payer picks one, pays from the connected account, then sees that option alone", async () => {
  // Its own server, with the chain's deposit factory, so the order also offers deposit addresses.
  const orders = await startApi("checkout_orders", chain, {
    DEPOSIT_FACTORIES: "evm:31337=0x0116686E2291dbd5e317F47faDBFb43B599786Ef",
  });
  try {
    const accepted = await orders.merchant("POST", "/v1/merchant", {
      display_name: "Kaffa Coffee Roasters",
      payout_address: MERCHANT,
      accepted_assets: [
        { chain: "evm:31337", token: DEVNET_USD, currency: "usd" },
        { chain: "evm:31337", token: USDC, currency: "usd" },
      ],
    }, "accept");
    assert.equal(accepted.status, 200, JSON.stringify(accepted.body));
    const created = await orders.merchant("POST", "/v1/payment_intents", { amount: "12.50", currency: "usd" });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const order = created.body;
    const pick = (token, method) => order.payment_options.find((o) => o.token === token && o.payment_method === method);
    const before = balanceOf(USDC, MERCHANT);
    const { page, wallet, context } = await walletPage();
    await page.goto(order.checkout_url);
    await until("the price", async () => (await page.locator("#amount").textContent()) === "12.50");
    assert.equal(await page.locator("#symbol").textContent(), "USD");
    const radios = page.getByRole("radio");
    await until("four options", async () => (await radios.count()) === 4);
    assert.equal(await page.getByRole("button", { name: "Connect wallet" }).isHidden(), true, "nothing to pay before a pick");
    await accessible(page, "an order's options (en)");
    await shot(page, "order-options");

    // Sending from an exchange: the option's own address and its EIP-681 code.
    const byTransfer = pick(USDC, "deposit_address");
    await page.getByRole("radio", { name: /12\.50 USDC .*send to an address/ }).check();
    await page.locator("#deposit-address", { hasText: byTransfer.deposit_address }).waitFor();
    await until("the QR code drawn", () => page.locator("#qr").evaluate((img) => img.complete && img.naturalWidth > 0));
    assert.equal(
      await page.locator("#qr").getAttribute("alt"),
      `ethereum:${USDC}@31337/transfer?address=${byTransfer.deposit_address}&uint256=12500000`,
    );
    await accessible(page, "an order's deposit option (en)");
    await shot(page, "order-deposit-option");

    // Signing in the wallet: the connected account is the payer, bound when it confirms.
    const bySignature = pick(USDC, "authorization");
    await page.getByRole("radio", { name: /12\.50 USDC .*sign in your wallet/ }).check();
    await page.getByRole("button", { name: "Connect wallet" }).click();
    const pay = page.getByRole("button", { name: "Pay 12.50 USDC" });
    await until("Pay enabled", () => pay.isEnabled());
    assert.deepEqual(wallet.switched, ["0x7a69"], "the wallet was switched to the option's chain");
    await shot(page, "order-connected");
    await pay.click();
    await until("succeeded", async () => /Paid\. Transaction 0x[0-9a-f]{64}/.test(await status(page).textContent()));
    assert.equal(await page.locator("#options").isHidden(), true, "the chosen option alone");
    assert.equal(await page.locator("#symbol").textContent(), "USDC");
    assert.equal(balanceOf(USDC, MERCHANT) - before, 12500000n);
    const { body } = await orders.merchant("GET", `/v1/payment_intents/${order.id}`);
    assert.equal(body.selected_option, bySignature.id);
    assert.equal(body.payer, PAYER);
    await accessible(page, "a paid order (en)");
    await shot(page, "order-paid");
    await context.close();
  } finally {
    orders.stop();
  }
});

test("while the intent loads, the page says so instead of showing empty values", async () => {
  const intent = await createIntent();
  const { page, context } = await walletPage();
  // The view's answer is held until the test has looked at the page without it.
  let release;
  const held = new Promise((resolve) => (release = resolve));
  await page.route(`**/v1/checkout/${intent.id}`, async (route) => {
    await held;
    await route.continue();
  });
  await page.goto(intent.checkout_url);
  await until("the loading note", async () => (await status(page).textContent()) === "Loading this payment…");
  for (const field of ["#merchant", "#amount", "#chain", "#recipient", "#countdown"]) {
    assert.equal((await page.locator(field).textContent()).trim(), "…", `${field} while loading`);
  }
  assert.equal(await page.locator("#connect").isDisabled(), true, "nothing to pay until it is known");
  await accessible(page, "the loading page (en)");
  await page.screenshot({ path: path.join(shots, "loading-en.png"), fullPage: true });
  release();
  await until("the amount", async () => (await page.locator("#amount").textContent()) === "25.00");
  assert.equal(await status(page).textContent(), "Waiting for your payment.");
  await context.close();
});

test("a refunded payment says what was refunded, not just Paid", async () => {
  const intent = await createIntent();
  const { page, context } = await walletPage();
  await payThrough(page, intent);
  await until("succeeded", async () => /^Paid\. Transaction/.test(await status(page).textContent()));

  // A part, then the rest, refunded by the merchant's signed authorization.
  const refund = async (amount, expected) => {
    const created = await merchant("POST", `/v1/payment_intents/${intent.id}/refunds`, { amount });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const document = await merchant("GET", `/v1/refunds/${created.body.id}/authorization`);
    assert.equal(document.status, 200, JSON.stringify(document.body));
    const signature = await rpc("eth_signTypedData_v4", [MERCHANT, JSON.stringify(document.body.typed_data)]);
    const confirmed = await merchant("POST", `/v1/refunds/${created.body.id}/confirm`, { signature });
    assert.equal(confirmed.status, 200, JSON.stringify(confirmed.body));
    await until("the refund on chain", async () => (await merchant("GET", `/v1/refunds/${created.body.id}`)).body.state === "succeeded");
    await page.reload();
    await until("the refund shown", async () => (await status(page).textContent()).startsWith(expected));
  };
  await refund("10000000", "Paid, and 10.00 dUSD of it refunded to you. Transaction 0x");
  await accessible(page, "the partly refunded page (en)");
  await shot(page, "refunded-part");
  await refund("15000000", "Paid, and refunded to you in full (25.00 dUSD). Transaction 0x");
  await page.locator('[data-lang="zh-TW"]').click();
  await until("in Traditional Chinese", async () => (await status(page).textContent()).startsWith("已付款，並已全額退款給您（25.00 dUSD）"));
  await accessible(page, "the refunded page (zh-TW)");
  await shot(page, "refunded");
  await context.close();
});

/// A token like Tether's (no EIP-3009, its `transfer` returns nothing), the payer holding some;
/// deployed by cast.
function usdtLike() {
  return deployToken("NoReturnToken");
}

/// What the payer lets Permit2 move of `token`, as cast reads it.
function permit2Allowance(token) {
  return execFileSync(path.join(tools, "cast"), [
    "call", "--rpc-url", chain.url, token, "allowance(address,address)(uint256)", PAYER,
    "0x000000000022D473030F116dDEE9F6B43aC78BA3",
  ]).toString().trim();
}

/// A test token of `contracts/build/<name>.json` whose constructor takes its holders and what each
/// holds, the payer holding some; deployed by cast.
function deployToken(name) {
  const { bytecode } = JSON.parse(readFileSync(path.join(root, `contracts/build/${name}.json`), "utf8"));
  const sent = execFileSync(path.join(tools, "cast"), [
    "send", "--json", "--rpc-url", chain.url, "--private-key", PAYER_KEY,
    "--create", bytecode, "constructor(address[],uint256)", `[${PAYER}]`, "1000000000000",
  ]);
  return JSON.parse(sent.toString()).contractAddress;
}

test("a token without EIP-3009 is paid by Permit2: the page says why it asks for an approval first, then the payer signs and pays once", async () => {
  const token = usdtLike();
  const created = await merchant("POST", "/v1/payment_intents", {
    chain: "evm:31337", token, merchant: MERCHANT, amount: "1500000", payment_method: "permit2",
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const intent = created.body;
  const before = balanceOf(token, MERCHANT);
  const { page, wallet, context } = await walletPage();
  let release;
  wallet.holdSends = new Promise((resolve) => { release = resolve; });
  await payThrough(page, intent);
  await until("the approval explained", async () => /Permit2/.test(await status(page).textContent()));
  await accessible(page, "the Permit2 approval (en)");
  await shot(page, "permit2-approval");
  release();
  await until("succeeded", async () => /Paid\. Transaction 0x[0-9a-f]{64}/.test(await status(page).textContent()));
  // One approval, of Permit2 for the amount, sent by the payer's wallet to the token.
  assert.equal(wallet.sent.length, 1, JSON.stringify(wallet.sent));
  assert.equal(wallet.sent[0].to.toLowerCase(), token.toLowerCase());
  const allowance = permit2Allowance(token);
  assert.equal(allowance, "0", "Permit2 moved exactly what it was let move");
  assert.equal(balanceOf(token, MERCHANT) - before, 1500000n);
  const { body } = await merchant("GET", `/v1/payment_intents/${intent.id}`);
  assert.equal(body.state, "succeeded");
  assert.equal(body.payment_method, "permit2");
  assert.equal(body.payer, PAYER);
  await context.close();
});

test("a token with EIP-2612 is paid by Permit2 without a transaction: the page asks for a signed permit, says why, then the payment's signature, and pays once", async () => {
  const token = deployToken("PermitToken");
  const created = await merchant("POST", "/v1/payment_intents", {
    chain: "evm:31337", token, merchant: MERCHANT, amount: "2500000", payment_method: "permit2",
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const intent = created.body;
  const before = balanceOf(token, MERCHANT);
  const { page, wallet, context } = await walletPage();
  let release;
  wallet.holdSignatures = new Promise((resolve) => { release = resolve; });
  await payThrough(page, intent);
  await until("the permit explained", async () => /sign a permit/.test(await status(page).textContent()));
  assert.match(await status(page).textContent(), /PUSD/);
  await accessible(page, "the token's permit for Permit2 (en)");
  await shot(page, "permit2-token-permit");
  release();
  await until("succeeded", async () => /Paid\. Transaction 0x[0-9a-f]{64}/.test(await status(page).textContent()));
  // Two signatures, the token's permit first, and no transaction from the payer's wallet.
  assert.deepEqual(wallet.signed.map((typed) => typed.primaryType), ["Permit", "PermitWitnessTransferFrom"]);
  assert.equal(wallet.sent.length, 0, JSON.stringify(wallet.sent));
  const allowance = permit2Allowance(token);
  assert.equal(allowance, "0", "Permit2 moved exactly what the permit let it move");
  assert.equal(balanceOf(token, MERCHANT) - before, 2500000n);
  const { body } = await merchant("GET", `/v1/payment_intents/${intent.id}`);
  assert.deepEqual([body.state, body.payment_method, body.payer], ["succeeded", "permit2", PAYER]);
  await context.close();
});
