// Every error code the API documents is mapped to a class, and each is classified as retried or
// not as the contract says. The codes are read from docs/api.md and openapi.json, so a new code
// fails here until it is mapped.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import * as client from "../src/index.js";

const root = fileURLToPath(new URL("../../../", import.meta.url));

function documentedCodes() {
  const codes = new Map();
  const doc = readFileSync(`${root}docs/api.md`, "utf8");
  const table = doc.slice(doc.indexOf("## Errors"), doc.indexOf("A 503 says what the server knows"));
  for (const row of table.matchAll(/^\| (\d{3}) \| (.*?) \|/gm)) {
    for (const [, code] of row[2].matchAll(/`([a-z][a-z0-9_]*)`/g)) codes.set(code, Number(row[1]));
  }
  const api = JSON.parse(readFileSync(`${root}openapi.json`, "utf8"));
  const states = new Set(api.components.schemas.IntentState.enum);
  for (const operations of Object.values(api.paths)) {
    for (const operation of Object.values(operations)) {
      for (const [status, answer] of Object.entries(operation.responses ?? {})) {
        if (!/^[45]/.test(status)) continue;
        for (const [, code] of (answer.description ?? "").matchAll(/`([a-z][a-z0-9_]*)`/g)) {
          if (!states.has(code) && !codes.has(code)) codes.set(code, Number(status));
        }
      }
    }
  }
  return codes;
}

test("every documented error code is mapped, and nothing else", () => {
  const codes = documentedCodes();
  assert.ok(codes.size >= 20, `only ${codes.size} codes found: the docs' table moved?`);
  assert.deepEqual([...codes.keys()].sort(), Object.keys(client.ERROR_CODES).sort());
});

test("each code becomes its class, retried only where a retry can change the answer", () => {
  const retried = new Set(["idempotency_key_in_flight", "idempotency_key_lease_lost", "rate_limited", "unavailable"]);
  for (const [code, status] of documentedCodes()) {
    const error = client.errorFromResponse({
      status, body: { error: code, detail: "d" }, headers: { "x-request-id": "req-1" }, method: "POST", idempotencyKey: "k-1",
    });
    assert.ok(error instanceof client.ERROR_CODES[code], `${code} is a ${error.constructor.name}`);
    assert.ok(error instanceof client.PaymentsApiError);
    assert.equal(error.code, code);
    assert.equal(error.status, status);
    assert.equal(error.requestId, "req-1");
    assert.equal(error.idempotencyKey, "k-1");
    assert.equal(error.retryable, retried.has(code), code);
    // Definite refusals leave nothing to look up; a 500 and the transient ones may hide a done POST.
    const unknown = status === 500 || (retried.has(code) && code !== "rate_limited");
    assert.equal(error.outcomeUnknown, unknown, code);
  }
});

test("a replayed 500 says the outcome is indeterminate and names the key", () => {
  const error = client.errorFromResponse({
    status: 500, body: { error: "internal_error", detail: "boom" }, headers: { "idempotent-replayed": "true" },
    method: "POST", idempotencyKey: "order-77",
  });
  assert.ok(error instanceof client.ServerError);
  assert.equal(error.replayed, true);
  assert.equal(error.retryable, false);
  assert.equal(error.outcomeUnknown, true);
  assert.match(error.message, /indeterminate/);
  assert.match(error.message, /"order-77"/);
});

test("proxies' own answers without the API's body are still typed", () => {
  const gateway = client.errorFromResponse({ status: 502, body: "<html>502 Bad Gateway</html>" });
  assert.ok(gateway instanceof client.UnavailableError);
  assert.equal(gateway.code, "bad_gateway");
  assert.equal(gateway.retryable, true);
  assert.equal(client.errorFromResponse({ status: 504, body: "" }).code, "gateway_timeout");
  // A GET has no key and changes nothing: never an unknown outcome.
  assert.equal(gateway.outcomeUnknown, false);
});

test("Retry-After is waited, capped; without it the backoff is full jitter under the ceiling", () => {
  const options = { retryBaseDelayMs: 100, retryMaxDelayMs: 1000, retryAfterMaxMs: 5000 };
  assert.equal(client.retryDelayMs(0, "2", options), 2000);
  assert.equal(client.retryDelayMs(0, "3600", options), 5000);
  const date = new Date(Date.now() + 3000).toUTCString();
  const fromDate = client.retryDelayMs(0, date, options);
  assert.ok(fromDate > 1000 && fromDate <= 3000, `${fromDate}`);
  for (let retry = 0; retry < 8; retry++) {
    const ceiling = Math.min(1000, 100 * 2 ** retry);
    const delays = Array.from({ length: 200 }, () => client.retryDelayMs(retry, undefined, options));
    assert.ok(delays.every((d) => d >= 0 && d <= ceiling), `retry ${retry}`);
    // Full jitter spreads over the whole range rather than clustering at the ceiling.
    assert.ok(Math.min(...delays) < ceiling / 4 && Math.max(...delays) > (ceiling * 3) / 4, `retry ${retry}`);
  }
});
