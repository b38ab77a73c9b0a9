// The Python suite's stack, started by the project's own tests/node/stack.mjs so both suites run
// the same thing: anvil with the devnet token, then payments-api on a fresh database. Prints one
// JSON line per API, `{"chain": url, "base": url}`. Each JSON line read on stdin (settings for
// startApi) starts another API on the same chain; the end of stdin stops everything.
import { createInterface } from "node:readline";
import { startChain, startApi } from "../../../tests/node/stack.mjs";

const settings = JSON.parse(process.argv[2] ?? "{}");
const chain = await startChain();
const apis = [];
const stop = () => {
  for (const api of apis) api.stop();
  chain.stop();
};
process.on("SIGTERM", () => (stop(), process.exit(0)));

async function start(env) {
  const api = await startApi("clients", chain, env);
  apis.push(api);
  process.stdout.write(JSON.stringify({ chain: chain.url, base: api.base }) + "\n");
}

try {
  await start(settings);
  for await (const line of createInterface({ input: process.stdin })) {
    if (line.trim()) await start({ ...settings, ...JSON.parse(line) });
  }
} finally {
  stop();
}
