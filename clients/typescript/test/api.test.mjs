// The client against the real server: anvil with the devnet token, the payments-api binary on a
// fresh PostgreSQL database (tests/node/stack.mjs), and, where the network must fail, the fault
// proxy of ./fault-proxy.mjs in between. Each test uses a merchant of its own, so counts are its.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startChain, startApi, until, freePort, root, DEVNET_USD, PAYER, MERCHANT } from "../../../tests/node/stack.mjs";
import {
  PaymentsApi, PaymentsApiError, InvalidRequestError, AuthenticationError, NotFoundError, ConflictError,
  IdempotencyError, UnsupportedError, RateLimitError, ServerError, ApiConnectionError, WebhookVerificationError,
  errorFromResponse,
} from "../src/index.js";
import { startFaultProxy, faultMix } from "./fault-proxy.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const MERCHANTS = ["demo", "other", "faults", "plain", "pages", "hooks", "errors", "retries"];
const bootstrap = MERCHANTS.map((m) => `merchant-${m}=merchant_${m}`).join(",");
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

let chain;
let api;
const client = (merchant, options = {}) => new PaymentsApi({ apiKey: `merchant-${merchant}`, baseUrl: api.base, ...options });
const intentParams = (i, extra = {}) => ({
  chain: "evm:31337", token: DEVNET_USD, payer: PAYER, merchant: MERCHANT, amount: String(1000 + i), metadata: { call: String(i) }, ...extra,
});

/// Runs `task(i)` for i < n, `width` at a time; every outcome, in order.
async function pool(n, width, task) {
  const outcomes = new Array(n);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < n) {
      const i = next++;
      try {
        outcomes[i] = { value: await task(i) };
      } catch (error) {
        outcomes[i] = { error };
      }
    }
  }));
  return outcomes;
}

before(async () => {
  chain = await startChain();
  api = await startApi("clients", chain, {
    BOOTSTRAP_API_KEYS: bootstrap,
    // The fault run sends over a thousand requests a second; the limits get a test of their own.
    MERCHANT_RATE_LIMIT: "0",
    MERCHANT_CONCURRENCY_LIMIT: "0",
    WEBHOOK_ALLOW_HTTP: "true",
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
  });
});

after(() => {
  api?.stop();
  chain?.stop();
});

// The second run of scripts/clients-test.sh, on Node 18, leaves this load out (CLIENTS_TS_SKIP_LOAD=1).
const skipLoad = process.env.CLIENTS_TS_SKIP_LOAD === "1" && "the load run: on the first Node only";
test("1000 creates through dropped, late and 502 answers: exactly 1000 intents, each the one stored for its key", { skip: skipLoad }, async (t) => {
  const N = 1000;
  const TIMEOUT = 1000;
  const proxy = await startFaultProxy(api.base, { choose: faultMix(), holdMs: TIMEOUT + 300 });
  try {
    const faulty = new PaymentsApi({
      apiKey: "merchant-faults", baseUrl: proxy.url, timeoutMs: TIMEOUT, retryBaseDelayMs: 20, retryMaxDelayMs: 250,
      // 20% of attempts fail: ten retries leave one call in ten million to chance.
      maxRetries: 10,
    });
    const outcomes = await pool(N, 16, (i) => faulty.paymentIntents.create(intentParams(i)));
    const failed = outcomes.filter((o) => o.error);
    assert.deepEqual(failed.map((o) => `${o.error.code}: ${o.error.message}`), [], "no call may fail");
    const results = outcomes.map((o) => o.value);

    const direct = client("faults");
    const stored = await direct.paymentIntents.list().toArray();
    assert.equal(stored.length, N, "intents stored for 1000 creates");
    const byId = new Map(stored.map((intent) => [intent.id, intent]));
    assert.equal(new Set(stored.map((intent) => intent.metadata.call)).size, N, "one intent per call");
    const keys = new Set();
    await pool(N, 16, async (i) => {
      const result = results[i];
      const key = result.lastResponse.idempotencyKey;
      assert.match(key, UUID_V4);
      keys.add(key);
      const record = await direct.idempotencyKeys.retrieve(key);
      assert.equal(record.resource_id, result.id, `call ${i} got the intent stored for its key`);
      assert.equal(record.response_status, 201);
      assert.deepEqual(result, byId.get(result.id), `call ${i} returned the intent as stored`);
      assert.equal(result.metadata.call, String(i));
    });
    assert.equal(keys.size, N, "a key per logical call, never shared");
    const retried = results.filter((r) => r.lastResponse.attempts > 1).length;
    const replayed = results.filter((r) => r.lastResponse.replayed).length;
    assert.ok(proxy.counts.reset > 50 && proxy.counts.hold > 20 && proxy.counts.bad_gateway > 20, JSON.stringify(proxy.counts));
    assert.ok(replayed > 0, "lost answers were learned by replay");

    // The same run without the library's retries: a client that sends again with a new key.
    const plainCreate = async (i) => {
      for (let attempt = 1; attempt <= 50; attempt++) {
        const controller = new AbortController();
        const timer = setTimeout(() => controller.abort(), TIMEOUT);
        try {
          const answer = await fetch(`${proxy.url}/v1/payment_intents`, {
            method: "POST", signal: controller.signal, body: JSON.stringify(intentParams(i)),
            headers: { authorization: "Bearer merchant-plain", "content-type": "application/json", "idempotency-key": randomUUID() },
          });
          const text = await answer.text();
          if (answer.status === 201) return JSON.parse(text);
        } catch {
          // lost: send it again, as a fresh request
        } finally {
          clearTimeout(timer);
        }
      }
      throw new Error(`call ${i} never got a 201`);
    };
    const plain = await pool(N, 16, plainCreate);
    assert.deepEqual(plain.filter((o) => o.error).map((o) => o.error.message), []);
    const plainStored = (await client("plain").paymentIntents.list().toArray()).length;
    assert.ok(plainStored > N, `plain HTTP made ${plainStored} intents`);
    t.diagnostic(`with the library's retries: ${stored.length} intents for ${N} creates (${retried} calls retried, ${replayed} answered by replay)`);
    t.diagnostic(`plain HTTP, a new key per attempt: ${plainStored} intents for ${N} creates (${plainStored - N} duplicates)`);
    t.diagnostic(`proxy fates: ${JSON.stringify(proxy.counts)}`);
  } finally {
    await proxy.close();
  }
});

test("a call's key is the caller's or a fresh UUID v4, the same on every attempt; GETs carry none", async () => {
  let fates = [];
  const proxy = await startFaultProxy(api.base, { choose: () => fates.shift() ?? "pass" });
  try {
    const retrying = new PaymentsApi({ apiKey: "merchant-retries", baseUrl: proxy.url, retryBaseDelayMs: 10, retryMaxDelayMs: 50 });
    fates = ["reset", "bad_gateway"];
    const intent = await retrying.paymentIntents.create(intentParams(1), { idempotencyKey: "order-1001" });
    assert.equal(intent.lastResponse.attempts, 3);
    assert.equal(intent.lastResponse.idempotencyKey, "order-1001");
    assert.equal(intent.lastResponse.replayed, true, "the first attempt was done: the third got its stored answer");
    assert.deepEqual(proxy.seen.map((r) => r.headers["idempotency-key"]), ["order-1001", "order-1001", "order-1001"]);
    assert.equal(new Set(proxy.seen.map((r) => r.body)).size, 1, "the same bytes each time, or the server would see another request");

    proxy.seen.length = 0;
    fates = ["reset"];
    const first = await retrying.paymentIntents.create(intentParams(2));
    const second = await retrying.paymentIntents.create(intentParams(3));
    const sent = proxy.seen.map((r) => r.headers["idempotency-key"]);
    assert.equal(sent.length, 3);
    assert.equal(sent[0], sent[1], "the retry of the first call reused its key");
    assert.notEqual(sent[1], sent[2], "the next call has a key of its own");
    assert.match(first.lastResponse.idempotencyKey, UUID_V4);
    assert.equal(second.lastResponse.idempotencyKey, sent[2]);

    proxy.seen.length = 0;
    fates = ["bad_gateway", "reset"];
    const again = await retrying.paymentIntents.retrieve(intent.id);
    assert.equal(again.id, intent.id);
    assert.equal(again.lastResponse.attempts, 3);
    assert.equal(again.lastResponse.idempotencyKey, undefined);
    assert.ok(proxy.seen.every((r) => r.method === "GET" && r.headers["idempotency-key"] === undefined));
  } finally {
    await proxy.close();
  }
});

test("no answer after the last retry: the error names the key, and the key tells what happened", async () => {
  const proxy = await startFaultProxy(api.base, { choose: () => "reset" });
  try {
    const retrying = new PaymentsApi({ apiKey: "merchant-retries", baseUrl: proxy.url, maxRetries: 2, retryBaseDelayMs: 10 });
    const error = await retrying.paymentIntents.create(intentParams(4)).then(() => assert.fail("resolved"), (e) => e);
    assert.ok(error instanceof ApiConnectionError, error.stack);
    assert.equal(error.code, "connection_error");
    assert.equal(error.attempts, 3);
    assert.equal(error.retryable, true);
    assert.equal(error.outcomeUnknown, true);
    assert.match(error.idempotencyKey, UUID_V4);
    assert.ok(error.message.includes(error.idempotencyKey));
    // The server did it (every answer was lost after its commit): the key says so.
    const record = await client("retries").idempotencyKeys.retrieve(error.idempotencyKey);
    assert.equal(record.response_status, 201);
    const intent = await client("retries").paymentIntents.retrieve(record.resource_id);
    assert.equal(intent.metadata.call, "4");
  } finally {
    await proxy.close();
  }
});

test("a replayed 500 is not retried: indeterminate, naming the key", async () => {
  // The server stores a 500 only when it fails, which it cannot be made to here: the proxy
  // answers as the server replays one (same body and headers).
  const stored = {
    status: 500,
    headers: { "content-type": "application/json", "idempotent-replayed": "true", "x-request-id": "req-500" },
    body: JSON.stringify({ error: "internal_error", detail: "internal error" }),
  };
  const proxy = await startFaultProxy(api.base, { choose: (r) => (r.method === "POST" ? stored : "pass") });
  try {
    const retrying = new PaymentsApi({ apiKey: "merchant-retries", baseUrl: proxy.url, retryBaseDelayMs: 10 });
    const error = await retrying.paymentIntents.create(intentParams(5), { idempotencyKey: "order-500" }).then(() => assert.fail("resolved"), (e) => e);
    assert.ok(error instanceof ServerError);
    assert.equal(proxy.seen.length, 1, "never sent again");
    assert.equal(error.attempts, 1);
    assert.equal(error.replayed, true);
    assert.equal(error.outcomeUnknown, true);
    assert.equal(error.idempotencyKey, "order-500");
    assert.equal(error.requestId, "req-500");
    assert.match(error.message, /indeterminate.*order-500|order-500.*indeterminate/);
  } finally {
    await proxy.close();
  }
});

test("a server limited to a request a second, requiring keys, settling nothing: 429 waited as Retry-After says, capped; the other codes it answers", async () => {
  const limited = await startApi("clients", chain, {
    BOOTSTRAP_API_KEYS: bootstrap,
    MERCHANT_RATE_LIMIT: "1",
    MERCHANT_REFUSAL_PAUSE_MS: "0",
    IDEMPOTENCY_KEY_REQUIRED: "true",
    // Settlement off: intents may name any chain, and paying one is chain_not_settled.
    CHAINS: "",
  });
  try {
    // The limit is per second: a refusal comes within two calls of the same window.
    const refusedAmong = async (call) => {
      for (let i = 0; i < 5; i++) {
        try {
          await call();
        } catch (e) {
          return e;
        }
      }
      assert.fail("never refused");
    };
    const once = new PaymentsApi({ apiKey: "merchant-demo", baseUrl: limited.base, maxRetries: 0 });
    const refused = await refusedAmong(() => once.balances.list());
    assert.ok(refused instanceof RateLimitError, refused.stack);
    assert.equal(refused.code, "rate_limited");
    assert.equal(refused.status, 429);
    assert.equal(refused.attempts, 1);
    assert.equal(refused.retryable, true);
    assert.equal(refused.outcomeUnknown, false);
    const wait = Number(refused.headers["retry-after"]);
    assert.ok(wait >= 1, `Retry-After: ${wait}`);

    // Capped far below the server's second: the refused attempts follow each other at once.
    const impatient = new PaymentsApi({ apiKey: "merchant-other", baseUrl: limited.base, maxRetries: 3, retryAfterMaxMs: 20 });
    let outcome;
    for (let round = 0; round < 3 && !(outcome?.attempts > 1); round++) {
      await impatient.balances.list().catch(() => {});
      const started = Date.now();
      const result = await impatient.balances.list().then((r) => r.lastResponse, (e) => e);
      outcome = { attempts: result.attempts, ms: Date.now() - started, refused: result instanceof RateLimitError };
    }
    assert.ok(outcome.attempts > 1, `refused first: ${JSON.stringify(outcome)}`);
    assert.ok(outcome.ms < 900, `the capped waits took ${outcome.ms} ms, not Retry-After's ${wait} s`);

    // Waiting as told gets through: three calls in the same second take their turns.
    const patient = new PaymentsApi({ apiKey: "merchant-retries", baseUrl: limited.base });
    const begun = Date.now();
    const results = await Promise.all([0, 1, 2].map((i) => patient.paymentIntents.create(intentParams(10 + i))));
    const attempts = results.map((r) => r.lastResponse.attempts).sort();
    assert.equal(attempts[0], 1);
    assert.ok(attempts[2] >= 2, `attempts ${attempts}`);
    assert.ok(Date.now() - begun >= 1000 * (wait - 0.2), "the refused calls waited Retry-After");

    // The same server requires a key: only a call without the library gets that error.
    const answer = await fetch(`${limited.base}/v1/payment_intents`, {
      method: "POST", headers: { authorization: "Bearer merchant-plain" }, body: JSON.stringify(intentParams(0)),
    });
    const missing = errorFromResponse({ status: answer.status, body: await answer.json(), headers: {}, method: "POST" });
    assert.ok(missing instanceof IdempotencyError);
    assert.equal(missing.code, "idempotency_key_missing");

    const unsettled = new PaymentsApi({ apiKey: "merchant-errors", baseUrl: limited.base });
    const elsewhere = await unsettled.paymentIntents.create(intentParams(0, { chain: "evm:1" }));
    const notPaid = await unsettled.paymentIntents.authorization(elsewhere.id).then(() => assert.fail("resolved"), (e) => e);
    assert.ok(notPaid instanceof UnsupportedError, notPaid.stack);
    assert.equal(notPaid.code, "chain_not_settled");
    assert.equal(notPaid.status, 422);
    assert.equal(notPaid.retryable, false);
  } finally {
    limited.stop();
  }
});

test("every error the server answers here is typed with its code, and the refusals are not retried", async () => {
  const errors = client("errors", { retryBaseDelayMs: 10 });
  const refusal = (promise) => promise.then((value) => assert.fail(`resolved ${JSON.stringify(value)}`), (e) => e);
  const check = (error, Class, status, code) => {
    assert.ok(error instanceof Class, `${code}: got ${error.stack}`);
    assert.ok(error instanceof PaymentsApiError);
    assert.equal(error.status, status);
    assert.equal(error.code, code);
    assert.equal(typeof error.detail, "string");
    assert.equal(error.attempts, 1, `${code} was sent once`);
    assert.equal(error.retryable, false);
    assert.equal(error.outcomeUnknown, false);
    assert.ok(error.requestId, "the request id, for the server's log");
  };

  check(await refusal(errors.paymentIntents.create(intentParams(0, { amount: "01" }))), InvalidRequestError, 400, "invalid_request");
  check(await refusal(client("nobody").paymentIntents.retrieve("pi_000000000000000000000000")), AuthenticationError, 401, "unauthorized");
  check(await refusal(errors.paymentIntents.retrieve("pi_000000000000000000000000")), NotFoundError, 404, "not_found");
  check(await refusal(errors.request("DELETE", "/v1/payment_intents")), InvalidRequestError, 405, "method_not_allowed");
  const badKey = await refusal(errors.paymentIntents.create(intentParams(0), { idempotencyKey: "two words" }));
  check(badKey, IdempotencyError, 400, "idempotency_key_invalid");

  const intent = await errors.paymentIntents.create(intentParams(0), { idempotencyKey: "order-7" });
  const reused = await refusal(errors.paymentIntents.create(intentParams(0, { amount: "999" }), { idempotencyKey: "order-7" }));
  check(reused, IdempotencyError, 422, "idempotency_key_reused");
  assert.equal(reused.idempotencyKey, "order-7");
  const canceled = await errors.paymentIntents.cancel(intent.id);
  assert.equal(canceled.state, "canceled");
  check(await refusal(errors.paymentIntents.cancel(intent.id)), ConflictError, 409, "invalid_state_transition");
  check(await refusal(errors.refunds.create(intent.id)), ConflictError, 409, "invalid_state_transition");

  const notAToken = await errors.paymentIntents.create(intentParams(0, { token: "0x90F79bf6EB2c4f870365E785982E1f101E93b906" }));
  check(await refusal(errors.paymentIntents.authorization(notAToken.id)), UnsupportedError, 422, "token_not_supported");

  // A paid intent refunded in full: a second refund exceeds the payment.
  const paid = await errors.paymentIntents.create(intentParams(0));
  const { typed_data } = await errors.paymentIntents.authorization(paid.id);
  const signature = await chain.rpc("eth_signTypedData_v4", [PAYER, JSON.stringify(typed_data)]);
  const processing = await errors.paymentIntents.confirm(paid.id, { signature });
  assert.equal(processing.state, "processing");
  await until("the payment to settle", async () => (await errors.paymentIntents.retrieve(paid.id)).state === "succeeded");
  const refund = await errors.refunds.create(paid.id, { reason: "requested_by_customer" });
  assert.equal(refund.amount, paid.amount);
  assert.equal((await errors.refunds.retrieve(refund.id)).id, refund.id);
  assert.deepEqual((await errors.refunds.list({ payment_intent: paid.id }).toArray()).map((r) => r.id), [refund.id]);
  check(await refusal(errors.refunds.create(paid.id)), ConflictError, 409, "refund_exceeds_payment");

  // Last: the server refuses from Content-Length and closes the connection without saying so, and
  // fetch's shared pool may send the next call on it (which the library then retries, as it should).
  const big = intentParams(0, { metadata: Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${i}`, "x".repeat(500)])) });
  big.description = "y".repeat(70000);
  check(await refusal(errors.paymentIntents.create(big)), InvalidRequestError, 413, "payload_too_large");
});

test("list walks every page: 250 intents, newest first, each once", async () => {
  const pages = client("pages");
  const created = await pool(250, 16, (i) => pages.paymentIntents.create(intentParams(i)));
  assert.deepEqual(created.filter((o) => o.error), []);
  const sizes = [];
  for await (const page of pages.paymentIntents.list({ limit: 100 }).pages()) sizes.push(page.data.length);
  assert.deepEqual(sizes, [100, 100, 50]);
  const listed = [];
  for await (const intent of pages.paymentIntents.list()) listed.push(intent);
  assert.equal(listed.length, 250);
  assert.deepEqual(new Set(listed.map((i) => i.id)), new Set(created.map((o) => o.value.id)));
  // Compared as times: the server writes as many fraction digits as each needs.
  for (let i = 1; i < listed.length; i++) assert.ok(Date.parse(listed[i - 1].created_at) >= Date.parse(listed[i].created_at), "newest first");
  // Filters go with every page; small pages too.
  const canceled = listed.slice(0, 3);
  for (const intent of canceled) await pages.paymentIntents.cancel(intent.id);
  const onlyCanceled = await pages.paymentIntents.list({ state: "canceled", limit: 1 }).toArray();
  assert.deepEqual(new Set(onlyCanceled.map((i) => i.id)), new Set(canceled.map((i) => i.id)));
  const events = await pages.events.list({ type: "payment_intent.canceled", limit: 2 }).toArray();
  assert.equal(events.length, 3);
});

/// An HTTP receiver that keeps every delivery as it arrived: raw body and headers.
async function startReceiver() {
  const deliveries = [];
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    deliveries.push({ headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
    res.writeHead(204).end();
  });
  const port = await freePort();
  await new Promise((resolve) => server.listen(port, "127.0.0.1", resolve));
  // Node 18's close() waits for idle keep-alive connections (5 s); later Nodes close them.
  const close = () => (server.closeAllConnections(), new Promise((r) => server.close(r)));
  return { url: `http://127.0.0.1:${port}/`, deliveries, close };
}

test("webhooks: a real delivery verifies; a tampered body, an old timestamp and a stranger's secret do not; a rotated secret works", async () => {
  const hooks = client("hooks");
  const receiver = await startReceiver();
  try {
    const endpoint = await hooks.webhookEndpoints.create({ url: receiver.url, event_types: ["payment_intent.created"] });
    assert.match(endpoint.secret, /^whsec_/);
    assert.deepEqual((await hooks.webhookEndpoints.list().toArray()).map((e) => e.id), [endpoint.id]);
    const intent = await hooks.paymentIntents.create(intentParams(1));
    const delivery = await until("the first delivery", () => receiver.deliveries.find((d) => d.body.includes(intent.id)));

    const event = PaymentsApi.webhooks.verify(delivery.body, delivery.headers, endpoint.secret);
    assert.equal(event.type, "payment_intent.created");
    assert.equal(event.id, delivery.headers["webhook-id"]);
    assert.deepEqual(event.data.object, (await hooks.events.retrieve(event.id)).data.object);
    assert.equal(event.data.object.id, intent.id);
    // Fetch-style headers (a Request's) and raw bytes verify as well.
    assert.equal(PaymentsApi.webhooks.verify(new TextEncoder().encode(delivery.body), new Headers(delivery.headers), endpoint.secret).id, event.id);

    const rejects = (body, headers, secret, pattern) =>
      assert.throws(() => PaymentsApi.webhooks.verify(body, headers, secret), (e) => e instanceof WebhookVerificationError && pattern.test(e.message));
    rejects(delivery.body.replace(intent.amount, "999999999"), delivery.headers, endpoint.secret, /signature/);
    const old = String(Math.floor(Date.now() / 1000) - 600);
    rejects(delivery.body, { ...delivery.headers, "webhook-timestamp": old }, endpoint.secret, /too old/);
    rejects(delivery.body, delivery.headers, "whsec_" + Buffer.from(randomUUID()).toString("base64"), /signature/);

    const rotated = await hooks.webhookEndpoints.rotateSecret(endpoint.id);
    assert.notEqual(rotated.secret, endpoint.secret);
    const next = await hooks.paymentIntents.create(intentParams(2));
    const after = await until("a delivery after the rotation", () => receiver.deliveries.find((d) => d.body.includes(next.id)));
    assert.equal(after.headers["webhook-signature"].split(" ").length, 2, "signed with both secrets for a day");
    assert.equal(PaymentsApi.webhooks.verify(after.body, after.headers, rotated.secret).data.object.id, next.id);
    assert.equal(PaymentsApi.webhooks.verify(after.body, after.headers, endpoint.secret).data.object.id, next.id);
    rejects(delivery.body, delivery.headers, rotated.secret, /signature/);

    // The server records the attempt once it has the receiver's answer.
    const attempts = await until("the delivery's record", async () => (await hooks.events.deliveries(event.id)).data[0]);
    assert.equal(attempts.status_code, 204);
    assert.deepEqual(await hooks.webhookEndpoints.delete(endpoint.id), { id: endpoint.id, deleted: true });
  } finally {
    await receiver.close();
  }
});

test('the README\'s "Use it from code" TypeScript runs as written, from the packed package', async (t) => {
  const consumer = process.env.CLIENTS_TS_CONSUMER;
  if (!consumer) {
    t.skip("CLIENTS_TS_CONSUMER is unset: scripts/clients-test.sh installs the packed package there");
    return;
  }
  const readme = readFileSync(path.join(root, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Use it from code"), readme.indexOf("\n## ", readme.indexOf("## Use it from code") + 5));
  const block = section.match(/```ts\n([\s\S]*?)```/);
  assert.ok(block, "a ```ts block under \"## Use it from code\"");
  const port = await freePort();
  // The payer's wallet, which the README leaves to the reader: anvil, which holds the payer's key.
  const wallet = `const wallet = {
  signTypedData: async (address: unknown, typedData: unknown): Promise<string> => {
    const answer = await fetch(${JSON.stringify(chain.url)}, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_signTypedData_v4", params: [address, JSON.stringify(typedData)] }),
    });
    return ((await answer.json()) as { result: string }).result;
  },
};
`;
  const source = wallet + block[1].replaceAll("http://localhost:8080", api.base).replaceAll("9000", String(port));
  writeFileSync(path.join(consumer, "readme.ts"), source);
  const tsc = path.join(here, "../node_modules/.bin/tsc");
  execFileSync(tsc, ["--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext", "--types", "node", "readme.ts"], { cwd: consumer, stdio: "inherit" });
  const child = spawn(process.execPath, ["readme.js"], { cwd: consumer, stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (chunk) => (out += chunk));
  try {
    const paid = await until("the snippet's intent to be paid", () => out.match(/^payment_intent\.succeeded (pi_[0-9a-f]{24})$/m), 60000);
    // Deliveries are at least once and in no promised order: each event is awaited, not assumed.
    const printed = (type) => new RegExp(`^payment_intent\\.${type} ${paid[1]}$`, "m").test(out);
    await until("the snippet to print each of the intent's events", () => ["created", "processing"].every(printed), 60000);
    assert.equal((await client("demo").paymentIntents.retrieve(paid[1])).state, "succeeded");
  } finally {
    child.kill("SIGTERM");
  }
});
