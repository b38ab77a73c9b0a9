// `make bench`'s x402 workload (docs/x402.md, "How fast"), run by the loadgen against a
// payments-api and an anvil with one-second blocks that it started, once by EIP-3009 (the devnet
// token) and once by Permit2 (a token like Tether's, which the payer approved Permit2 for), the
// same workload each:
//
// 1. steady: X402_CLIENTS clients (32) pay for X402_SECONDS (10) through the express resource
//    server with @x402/fetch, one request after another each; settle latency is timed around the
//    resource server's own facilitator client;
// 2. burst: X402_BURST payments (450), signed beforehand, settled at once against /x402/settle:
//    how many of them one block carried.
//
// Prints one JSON object on stdout: the EIP-3009 figures, and the same under `permit2`. Needs
// X402_API (our base URL) and X402_RPC (anvil).

import { ExactEvmScheme as ExactEvmClient } from "@x402/evm";
import {
  approvePermit2, facilitatorAt, madePermit2Payment, payingClient, signPayment, startResource, usdtLike, walletOf,
} from "./resource.mjs";
import { MERCHANT_TOKEN, PAYER_KEY, DEVNET_USD } from "../node/stack.mjs";
const api = process.env.X402_API;
const rpcUrl = process.env.X402_RPC;
const clients = Number(process.env.X402_CLIENTS ?? 32);
const seconds = Number(process.env.X402_SECONDS ?? 10);
const burst = Number(process.env.X402_BURST ?? 450);

async function rpc(method, params = []) {
  const answer = await fetch(rpcUrl, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  return (await answer.json()).result;
}

const quantile = (sorted, q) => (sorted.length ? sorted[Math.round((sorted.length - 1) * q)] : null);
const round = (ms) => (ms === null ? null : Math.round(ms * 10) / 10);

/// The steady phase through the resource server's `route`, paid in `asset`.
async function steady(route, asset, permit2Asset) {
  const ours = facilitatorAt(`${api}/x402`);
  const settles = [];
  const timed = {
    verify: (...args) => ours.verify(...args),
    getSupported: (...args) => ours.getSupported(...args),
    settle: async (...args) => {
      const started = performance.now();
      try {
        return await ours.settle(...args);
      } finally {
        settles.push(performance.now() - started);
      }
    },
  };
  const resource = await startResource(`${api}/x402`, timed, { permit2Asset });
  const until = Date.now() + seconds * 1000;
  let paid = 0;
  let refused = 0;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      const { pay } = payingClient({ assets: [asset] });
      while (Date.now() < until) {
        const answer = await pay(`${resource.url}${route}`);
        await answer.arrayBuffer();
        if (answer.status === 200) paid += 1;
        else refused += 1;
      }
    }),
  );
  resource.close();
  settles.sort((a, b) => a - b);
  return {
    clients,
    seconds,
    paid_requests: paid,
    refused_requests: refused,
    settles_per_second: Math.round((paid / seconds) * 10) / 10,
    settle_p50_ms: round(quantile(settles, 0.5)),
    settle_p99_ms: round(quantile(settles, 0.99)),
  };
}

/// The burst: `burst` request bodies made by `make`, settled at once.
async function burstOf(make) {
  const payments = [];
  for (let i = 0; i < burst; i++) payments.push(await make());
  const started = performance.now();
  const answers = await Promise.all(
    payments.map(async (body) => {
      const answer = await fetch(`${api}/x402/settle`, {
        method: "POST",
        headers: { Authorization: `Bearer ${MERCHANT_TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      return answer.json();
    }),
  );
  const burstSeconds = (performance.now() - started) / 1000;
  const hashes = answers.filter((a) => a.success).map((a) => a.transaction);
  const refusals = {};
  for (const a of answers.filter((a) => !a.success)) {
    // An API error says what was unavailable in its detail's first words (the database, a chain).
    const reason = a.errorReason ?? (a.error ? `${a.error}: ${String(a.detail ?? "").slice(0, 48)}` : "unknown");
    refusals[reason] = (refusals[reason] ?? 0) + 1;
  }
  const perBlock = new Map();
  for (const hash of hashes) {
    const receipt = await rpc("eth_getTransactionReceipt", [hash]);
    perBlock.set(receipt.blockNumber, (perBlock.get(receipt.blockNumber) ?? 0) + 1);
  }
  return {
    burst_payments: burst,
    burst_succeeded: hashes.length,
    burst_blocks_used: perBlock.size,
    burst_max_payments_per_block: Math.max(0, ...perBlock.values()),
    burst_seconds: Math.round(burstSeconds * 100) / 100,
    burst_refusals: refusals,
  };
}

const eip3009 = await steady("/weather", DEVNET_USD);
const latest = await rpc("eth_getBlockByNumber", ["latest", false]);
const now = Number(BigInt(latest.timestamp));
const eip3009Burst = await burstOf(async () => (await signPayment({ now })).body);

const payer = walletOf(rpcUrl, PAYER_KEY);
const usdt = await usdtLike(payer);
await approvePermit2(payer, usdt);
const permit2 = await steady("/weather-permit2", usdt, usdt);
const permit2Burst = await burstOf(async () => {
  const { payload, required } = await madePermit2Payment({ scheme: "exact", Client: ExactEvmClient, asset: usdt });
  return { x402Version: 2, paymentPayload: payload, paymentRequirements: required };
});

console.log(JSON.stringify({ ...eip3009, ...eip3009Burst, permit2: { ...permit2, ...permit2Burst } }));
