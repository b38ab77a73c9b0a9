// The package in a browser: Debian's Chromium (driven by the playwright-core pinned in
// tests/browser/) opens a page that imports src/index.js as it is, with standardwebhooks and its
// dependencies from node_modules through an import map (they are CommonJS: served wrapped as ES
// modules, as a bundler would). The page's server proxies /v1/* to the API through the fault proxy,
// so the page calls the API on its own origin (no CORS) and its first create loses two answers.
// The page runs twice: on http://127.0.0.1 (a secure context, crypto.randomUUID) and on another
// host name (not a secure context: getRandomValues only).
//
// Needs: PAYMENTS_API_BIN, TEST_DATABASE_URL, tests/browser/node_modules, CHROMIUM (default
// /usr/bin/chromium). Without a Chromium it is skipped with a warning, unless BROWSER_TESTS_REQUIRED=1.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import http from "node:http";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Webhook } from "standardwebhooks";
import { startApi, root, DEVNET_USD, PAYER, MERCHANT } from "../../../tests/node/stack.mjs";
import { PaymentsApi } from "../src/index.js";
import { startFaultProxy } from "./fault-proxy.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
// Resolved by Chromium to 127.0.0.1 (--host-resolver-rules): an origin that is not a secure context.
const INSECURE_HOST = "shop.payments-client.test";

const missing = !existsSync(chromiumPath);
if (missing && process.env.BROWSER_TESTS_REQUIRED !== "1") {
  console.warn(`WARNING: the client's browser test is skipped: no Chromium at ${chromiumPath} (apt-get install chromium)`);
}
const skip = missing && process.env.BROWSER_TESTS_REQUIRED !== "1" ? `no Chromium at ${chromiumPath}` : false;

let api, proxy, pages, browser;
let fates = [];

/// A CommonJS file as an ES module: its require()s become imports of the files they resolve to
/// (served the same way), its exports the module's default and named exports.
function commonJsAsModule(file, modules) {
  const source = readFileSync(file, "utf8");
  const specifiers = [...new Set(Array.from(source.matchAll(/\brequire\("([^"]+)"\)/g), (m) => m[1]))];
  const local = createRequire(file);
  const url = (dependency) => "/cjs/" + path.relative(modules, local.resolve(dependency)).split(path.sep).join("/");
  const names = Object.keys(local(file)).filter((name) => /^[A-Za-z_$][\w$]*$/.test(name) && name !== "default" && name !== "__esModule");
  return [
    ...specifiers.map((specifier, i) => `import dependency${i} from ${JSON.stringify(url(specifier))};`),
    "const module = { exports: {} };",
    `const required = { ${specifiers.map((specifier, i) => `${JSON.stringify(specifier)}: dependency${i}`).join(", ")} };`,
    `(function (exports, require, module) {\n${source}\n}).call(module.exports, module.exports, (name) => required[name], module);`,
    "export default module.exports;",
    names.length ? `export const { ${names.join(", ")} } = module.exports;` : "",
  ].join("\n");
}

/// The page, the package's files and the API (through `upstream`) on one origin.
async function startPageServer(upstream) {
  const src = path.join(here, "../src");
  const modules = path.join(here, "../node_modules");
  const webhooksEntry = path.relative(modules, createRequire(path.join(src, "index.js")).resolve("standardwebhooks"));
  const importMap = { imports: { "payments-api-client": "/client/index.js", standardwebhooks: `/cjs/${webhooksEntry}` } };
  const page = `<!doctype html><meta charset="utf-8"><title>payments-api-client</title>
<script type="importmap">${JSON.stringify(importMap)}</script>
<script type="module">import * as client from "payments-api-client"; window.client = client;</script>`;
  const target = new URL(upstream);
  const server = http.createServer((req, res) => {
    const { pathname } = new URL(req.url, "http://page");
    const send = (type, body) => res.writeHead(200, { "content-type": type, "cache-control": "no-store" }).end(body);
    if (pathname.startsWith("/v1/")) {
      const forwarded = http.request(
        { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { ...req.headers, host: target.host }, agent: false },
        (answer) => {
          res.writeHead(answer.statusCode, answer.headers);
          answer.pipe(res);
        },
      );
      // The fault proxy reset the connection: so does this one, to the page.
      forwarded.on("error", () => req.socket.destroy());
      req.pipe(forwarded);
    } else if (pathname === "/") {
      send("text/html; charset=utf-8", page);
    } else if (pathname.startsWith("/client/") && pathname.endsWith(".js")) {
      const file = path.join(src, pathname.slice("/client/".length));
      if (!file.startsWith(src + path.sep) || !existsSync(file)) return res.writeHead(404).end();
      send("text/javascript", readFileSync(file));
    } else if (pathname.startsWith("/cjs/") && pathname.endsWith(".js")) {
      const file = path.join(modules, pathname.slice("/cjs/".length));
      if (!file.startsWith(modules + path.sep) || !existsSync(file)) return res.writeHead(404).end();
      send("text/javascript", commonJsAsModule(file, modules));
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { port: server.address().port, close: () => (server.closeAllConnections(), new Promise((r) => server.close(r))) };
}

before(async () => {
  if (skip) return;
  assert.ok(!missing, `${chromiumPath} is missing (BROWSER_TESTS_REQUIRED=1): apt-get install chromium`);
  const playwright = path.join(root, "tests/browser/package.json");
  let chromium;
  try {
    ({ chromium } = createRequire(playwright)("playwright-core"));
  } catch (e) {
    throw new Error(`playwright-core is not installed in tests/browser (npm ci --prefix tests/browser): ${e.message}`);
  }
  // Nothing is paid here: the API settles no chain, so no anvil is needed.
  api = await startApi("clients", { url: "" }, { CHAINS: "", BOOTSTRAP_API_KEYS: "merchant-secure=m_secure,merchant-insecure=m_insecure" });
  proxy = await startFaultProxy(api.base, { choose: (request) => (request.method === "POST" && fates.shift()) || "pass" });
  pages = await startPageServer(proxy.url);
  browser = await chromium.launch({
    executablePath: chromiumPath,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update",
      "--disable-sync", `--host-resolver-rules=MAP ${INSECURE_HOST} 127.0.0.1`, "--disable-features=HttpsUpgrades"],
  });
});

after(async () => {
  await browser?.close();
  await pages?.close();
  await proxy?.close();
  api?.stop();
});

test("src/index.js imports no module by a literal name but standardwebhooks, so bundlers for the browser resolve each", () => {
  const source = readFileSync(path.join(here, "../src/index.js"), "utf8");
  const names = Array.from(source.matchAll(/\b(?:import|from)\s*\(?\s*(?:\/\*.*?\*\/\s*)*["']([^"']+)["']/g), (m) => m[1]);
  // A literal import("node:crypto") fails an esbuild bundle for the browser, even where never reached.
  assert.deepEqual(names, ["standardwebhooks"]);
});

async function openPage(origin) {
  const page = await browser.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  page.on("console", (message) => message.type() === "error" && problems.push(message.text()));
  await page.goto(`${origin}/`);
  await page.waitForFunction(() => window.client, null, { timeout: 10000 }).catch((e) => {
    throw new Error(`the page did not load the package: ${problems.join("; ") || e.message}`);
  });
  return page;
}

for (const [name, host, secure] of [["secure", "127.0.0.1", true], ["insecure", INSECURE_HOST, false]]) {
  test(`in Chromium, ${secure ? "a secure context" : "not a secure context"}: creates through lost answers, retrieves, lists, verifies a webhook`, { skip }, async () => {
    const apiKey = `merchant-${name}`;
    const origin = `http://${host}:${pages.port}`;
    const page = await openPage(origin);
    try {
      proxy.seen.length = 0;
      // The first create's first answer is lost after the server committed, its second is a 502.
      fates = ["reset", "bad_gateway"];
      const params = { chain: "evm:31337", token: DEVNET_USD, payer: PAYER, merchant: MERCHANT, amount: "2500", metadata: { order: name } };
      const made = await page.evaluate(async ({ apiKey, params }) => {
        const { PaymentsApi } = window.client;
        const api = new PaymentsApi({ apiKey, baseUrl: location.origin, retryBaseDelayMs: 10, retryMaxDelayMs: 50 });
        const first = await api.paymentIntents.create(params);
        const second = await api.paymentIntents.create({ ...params, amount: "2600" });
        const retrieved = await api.paymentIntents.retrieve(first.id);
        const pages = [];
        for await (const page of api.paymentIntents.list({ limit: 1 }).pages()) pages.push(page.data.map((intent) => intent.id));
        return {
          secureContext: window.isSecureContext, randomUUID: typeof crypto.randomUUID, first, response: first.lastResponse,
          secondKey: second.lastResponse.idempotencyKey, retrieved, pages,
        };
      }, { apiKey, params });

      assert.equal(made.secureContext, secure);
      assert.equal(made.randomUUID, secure ? "function" : "undefined");
      assert.equal(made.first.state, "created");
      assert.equal(made.first.metadata.order, name);
      assert.match(made.response.idempotencyKey, UUID_V4);
      assert.match(made.secondKey, UUID_V4);
      assert.notEqual(made.secondKey, made.response.idempotencyKey);
      // Chromium may resend a request whose connection was reset itself: either way, the same key.
      assert.ok(made.response.attempts >= 2, `attempts ${made.response.attempts}`);
      assert.equal(made.response.replayed, true, "the lost answer was learned by replay");
      const creates = proxy.seen.filter((r) => r.method === "POST" && JSON.parse(r.body).amount === "2500");
      assert.ok(creates.length >= 3, `${creates.length} attempts reached the proxy`);
      assert.deepEqual(new Set(creates.map((r) => r.headers["idempotency-key"])), new Set([made.response.idempotencyKey]));
      assert.ok(creates.every((r) => /Chrome/.test(r.headers["user-agent"]) && r.headers.origin === origin), "sent by the page");
      assert.deepEqual(made.retrieved, made.first);
      const second = made.pages[0][0];
      assert.deepEqual(made.pages, [[second], [made.first.id]], "two pages of one, newest first: no duplicate from the retries");

      // A delivery of the intent's real event, signed here by standardwebhooks, verified in the page.
      const node = new PaymentsApi({ apiKey, baseUrl: api.base });
      const [event] = (await node.events.list({ type: "payment_intent.created" }).toArray()).filter((e) => e.data.object.id === made.first.id);
      assert.ok(event, "the intent's payment_intent.created event");
      const secret = `whsec_${randomBytes(24).toString("base64")}`;
      const body = JSON.stringify(event);
      const sent = new Date();
      const headers = { "webhook-id": event.id, "webhook-timestamp": String(Math.floor(sent / 1000)), "webhook-signature": new Webhook(secret).sign(event.id, sent, body) };
      const verified = await page.evaluate(({ body, headers, secret }) => {
        const { PaymentsApi, WebhookVerificationError } = window.client;
        const refused = (...args) => {
          try {
            PaymentsApi.webhooks.verify(...args);
            return "verified";
          } catch (e) {
            return e instanceof WebhookVerificationError ? e.message : `${e.name}: ${e.message}`;
          }
        };
        return {
          event: PaymentsApi.webhooks.verify(body, new Headers(headers), secret),
          fromBytes: PaymentsApi.webhooks.verify(new TextEncoder().encode(body).buffer, headers, secret).id,
          tampered: refused(body.replace('"2500"', '"9999"'), headers, secret),
          stranger: refused(body, headers, `whsec_${btoa("another endpoint's secret")}`),
        };
      }, { body, headers, secret });
      assert.deepEqual(verified.event, event);
      assert.equal(verified.fromBytes, event.id);
      assert.match(verified.tampered, /signature/);
      assert.match(verified.stranger, /signature/);
    } finally {
      await page.close();
    }
  });
}
