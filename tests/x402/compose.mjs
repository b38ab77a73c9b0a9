// `make compose-check`'s x402 step: the README's paywalled route against the compose stack. An
// @x402/express server whose facilitator is the API on localhost:8080, and an @x402/fetch client
// paying for one request in USDC; prints the settled transaction, exits 1 if it was not paid.

import { decodePaymentResponseHeader } from "@x402/fetch";
import { payingClient, startResource } from "./resource.mjs";

const api = process.env.X402_API ?? "http://localhost:8080";
const resource = await startResource(`${api}/x402`);
try {
  const { pay } = payingClient();
  const answer = await pay(`${resource.url}/weather-usdc`);
  const body = await answer.text();
  if (answer.status !== 200) throw new Error(`the paid request got ${answer.status}: ${body}`);
  const settled = decodePaymentResponseHeader(answer.headers.get("payment-response"));
  if (!settled.success) throw new Error(`PAYMENT-RESPONSE says ${JSON.stringify(settled)}`);
  console.log(JSON.stringify({ status: answer.status, body: JSON.parse(body), settled }));
} finally {
  resource.close();
}
