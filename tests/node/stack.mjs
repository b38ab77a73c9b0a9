// What the Node suites (tests/browser, tests/x402) run against: anvil with the devnet token and
// Circle's USDC deployed, and a payments-api binary (the scripts use the debug build) on a fresh
// database. Node's standard library only, so it needs no install of its own.
//
// Needs: PAYMENTS_API_BIN (a payments-api binary) and TEST_DATABASE_URL (a PostgreSQL server to
// create a database on). The scripts that run the suites set them.

import { spawn, spawnSync, execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const tools = path.join(root, "contracts/node_modules/.bin");
const binary = process.env.PAYMENTS_API_BIN ?? path.join(root, "target/debug/payments-api");
const serverUrl = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

// Anvil's well-known dev accounts (keys of a public mnemonic; a devnet only).
export const PAYER = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
export const PAYER_KEY = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
export const MERCHANT = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
export const STRANGER = "0x90F79bf6EB2c4f870365E785982E1f101E93b906";
export const STRANGER_KEY = "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6";
export const RELAYER_KEY = STRANGER_KEY;
export const SPARE_KEY = "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a";
export const DEVNET_USD = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
export const USDC = "0x0C8E79F3534B00D9a3D4a856B665Bf4eBC22f2ba";
export const MERCHANT_TOKEN = "merchant-demo";

export async function freePort() {
  return new Promise((resolve) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/// Waits until `check` answers something truthy (errors count as not yet, unless marked `final`).
export async function until(what, check, timeout = 30000) {
  const deadline = Date.now() + timeout;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (e) {
      if (e.final) throw e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/// Anvil (automine unless `args` say otherwise) with the devnet token and USDC deployed, by the
/// binary's own `devnet` command.
export async function startChain(args = []) {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = spawn(path.join(tools, "anvil"), ["--port", String(port), "--chain-id", "31337", "--silent", ...args], { stdio: "ignore" });
  const rpc = async (method, params = []) => {
    const answer = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
    });
    const body = await answer.json();
    if (body.error) throw Object.assign(new Error(body.error.message), { code: body.error.code });
    return body.result;
  };
  await until("anvil", () => rpc("eth_chainId"));
  execFileSync(binary, ["devnet", "--rpc-url", url], { stdio: "ignore" });
  const balanceOf = (token, address) => {
    const out = execFileSync(path.join(tools, "cast"), ["call", "--rpc-url", url, token, "balanceOf(address)(uint256)", address]);
    return BigInt(out.toString().trim().split(/\s+/)[0]);
  };
  return { url, rpc, balanceOf, stop: () => child.kill("SIGTERM") };
}

/// payments-api serving on a free port against a fresh database named after `suite`, settling on
/// `chain` with the relayer key; `env` adds or overrides settings.
export async function startApi(suite, chain, env = {}) {
  if (!existsSync(binary)) throw new Error(`${binary} is missing: cargo build --bin payments-api`);
  // Named after the script's run, which drops its databases at exit (scripts/lib/test-database.sh).
  const run = process.env.NODE_SUITE_RUN ?? `run${process.pid}`;
  const databaseUrl = serverUrl.replace(/\/[^/]*$/, `/${suite}_${run}_${Date.now()}`);
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  let log = "";
  const child = spawn(binary, ["serve", "--migrate"], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      BIND_ADDR: `127.0.0.1:${port}`,
      PUBLIC_BASE_URL: base,
      CHAINS: `evm:31337=${chain.url}`,
      CHAIN_CONFIRMATIONS: "1",
      CHAIN_POLL_INTERVAL_MS: "200",
      RELAYER_PRIVATE_KEY: RELAYER_KEY,
      BOOTSTRAP_API_KEYS: `${MERCHANT_TOKEN}=merchant_demo,merchant-other=merchant_other`,
      RUST_LOG: "info",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout.on("data", (chunk) => (log += chunk));
  child.stderr.on("data", (chunk) => (log += chunk));
  let exited = null;
  child.on("exit", (code, signal) => (exited = signal ?? `exit code ${code}`));
  try {
    await until("the API to be ready", async () => {
      if (exited) throw Object.assign(new Error(`the API stopped (${exited})`), { final: true });
      return (await fetch(`${base}/readyz`)).ok;
    }, 60000);
  } catch (e) {
    child.kill("SIGTERM");
    const last = log.trimEnd().split("\n").slice(-30).join("\n");
    throw new Error(`${e.message}; the server's last log lines:\n${last}`);
  }
  /// A call as the merchant: `{status, body}`.
  const merchant = async (method, route, body, key) => {
    const headers = { Authorization: `Bearer ${MERCHANT_TOKEN}`, "content-type": "application/json" };
    if (key) headers["Idempotency-Key"] = key;
    const answer = await fetch(`${base}${route}`, { method, headers, body: body && JSON.stringify(body) });
    return { status: answer.status, body: await answer.json() };
  };
  /// The binary's CLI against this server's database: what it printed (throws if it failed).
  const command = (args) => {
    const run = spawnSync(binary, args, { env: { ...process.env, DATABASE_URL: databaseUrl, PUBLIC_BASE_URL: base }, encoding: "utf8" });
    if (run.status !== 0) throw new Error(`payments-api ${args.join(" ")}: ${run.stderr}`);
    return run.stdout.trim();
  };
  return { base, merchant, command, log: () => log, stop: () => child.kill("SIGTERM") };
}
