// payments-api as an x402 facilitator, proven with x402's own code (docs/x402.md): the unmodified
// @x402/fetch client paying with a viem account, an @x402/express resource server whose
// HTTPFacilitatorClient points at our /x402, on anvil with the devnet token and Circle's USDC.
// Beside it, a differential test: the reference facilitator (x402Facilitator with @x402/evm's
// exact scheme) and ours verify the same bad payments and must give the same answers.
//
// Needs what tests/node/stack.mjs needs; scripts/x402-test.sh sets it.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, request as httpRequest } from "node:http";
import { x402Facilitator } from "@x402/core/facilitator";
import { decodePaymentSignatureHeader } from "@x402/core/http";
import { decodePaymentResponseHeader } from "@x402/fetch";
import { ExactEvmScheme as ExactEvmFacilitator } from "@x402/evm/exact/facilitator";
import { ExactEvmScheme as ExactEvmClient, toFacilitatorEvmSigner } from "@x402/evm";
import { UptoEvmScheme as UptoEvmFacilitator } from "@x402/evm/upto/facilitator";
import { UptoEvmScheme as UptoEvmClient } from "@x402/evm/upto/client";
import { keccak256, parseErc6492Signature, serializeErc6492Signature, toHex } from "viem";
// viem carries Multicall3's bytecode for its deployless calls, though it does not export it.
import { multicall3Bytecode } from "./node_modules/viem/_esm/constants/contracts.js";
import { privateKeyToAccount } from "viem/accounts";
import {
  freePort, startChain, startApi, until, PAYER, PAYER_KEY, MERCHANT, SPARE_KEY, DEVNET_USD, USDC, RELAYER_KEY,
} from "../node/stack.mjs";
import { generatePaymentId } from "@x402/extensions/payment-identifier";
import {
  METERED_CHARGE, NETWORK, PRICE, SMART_WALLET_FACTORY, TOKENS, approvePermit2, facilitatorAt, madePermit2Payment, payingClient,
  placeSmartWalletFactory, signPayment, startResource, undeployedSmartWallet, usdtLike, walletOf,
} from "./resource.mjs";

const TRANSFER = keccak256(toHex("Transfer(address,address,uint256)"));

let chain, api, resource, resourceUrl, dropper;
/// The reference facilitator the differential tests compare ours with, once made.
let referenceFacilitator;

/// A proxy to our API that, while armed, answers nothing to the next POST /x402/settle: it lets the
/// request through, waits for our answer and then drops the connection.
async function startDropper(upstream) {
  const target = new URL(upstream);
  const state = { armed: false, dropped: 0 };
  const server = createServer((req, res) => {
    const drop = state.armed && req.method === "POST" && req.url.endsWith("/x402/settle");
    if (drop) state.armed = false;
    const forward = httpRequest(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        if (drop) {
          answer.resume();
          answer.on("end", () => {
            state.dropped += 1;
            req.socket.destroy();
          });
          return;
        }
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      },
    );
    req.pipe(forward);
  });
  const port = await freePort();
  await new Promise((resolve) => server.listen(port, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${port}`, state, close: () => server.close() };
}

/// The token transfers in a mined transaction: [from, to, value].
async function transfersIn(hash) {
  const receipt = await chain.rpc("eth_getTransactionReceipt", [hash]);
  assert.equal(receipt?.status, "0x1", `${hash} is mined and succeeded`);
  return receipt.logs
    .filter((log) => log.topics[0] === TRANSFER)
    .map((log) => [`0x${log.topics[1].slice(26)}`, `0x${log.topics[2].slice(26)}`, BigInt(log.data)]);
}

const paidOnce = (transfers, payer = PAYER) =>
  assert.deepEqual(transfers, [[payer.toLowerCase(), MERCHANT.toLowerCase(), BigInt(PRICE)]]);

before(async () => {
  chain = await startChain();
  // Undeployed Coinbase Smart Wallets may pay (ERC-6492): their factory is allowed.
  api = await startApi("x402", chain, { X402_ERC6492_FACTORIES: SMART_WALLET_FACTORY });
  dropper = await startDropper(api.base);
  resource = await startResource(`${dropper.url}/x402`);
  resourceUrl = resource.url;
});

after(async () => {
  resource?.close();
  dropper?.close();
  api?.stop();
  chain?.stop();
});

test("a paid request gets 200 and a PAYMENT-RESPONSE whose hash is a mined transfer of exactly the price", async () => {
  for (const [route, asset] of [["/weather", DEVNET_USD], ["/weather-usdc", USDC]]) {
    const before = chain.balanceOf(asset, MERCHANT);
    const { pay } = payingClient();
    const answer = await pay(`${resourceUrl}${route}`);
    assert.equal(answer.status, 200, await answer.clone().text());
    assert.ok((await answer.json()).weather.startsWith("sunny"));
    const settled = decodePaymentResponseHeader(answer.headers.get("payment-response"));
    assert.equal(settled.success, true, JSON.stringify(settled));
    assert.equal(settled.network, NETWORK);
    assert.equal(settled.payer, PAYER);
    paidOnce(await transfersIn(settled.transaction));
    assert.equal(chain.balanceOf(asset, MERCHANT), before + BigInt(PRICE), route);
  }
});

test("the same PAYMENT-SIGNATURE replayed gets no second access and no second transfer", async () => {
  const { pay, sent } = payingClient();
  const first = await pay(`${resourceUrl}/weather`);
  assert.equal(first.status, 200);
  const balance = chain.balanceOf(DEVNET_USD, MERCHANT);
  for (let i = 0; i < 3; i++) {
    const replay = await fetch(`${resourceUrl}/weather`, { headers: { "PAYMENT-SIGNATURE": sent[0] } });
    assert.equal(replay.status, 402, `replay ${i} is refused`);
  }
  assert.equal(chain.balanceOf(DEVNET_USD, MERCHANT), balance);
});

test("ten parallel requests with one payment: one access, one transfer", async () => {
  const { pay, sent } = payingClient({ hold: true });
  assert.equal((await pay(`${resourceUrl}/weather`)).status, 599);
  const balance = chain.balanceOf(DEVNET_USD, MERCHANT);
  const answers = await Promise.all(
    Array.from({ length: 10 }, () => fetch(`${resourceUrl}/weather`, { headers: { "PAYMENT-SIGNATURE": sent[0] } })),
  );
  const statuses = answers.map((a) => a.status);
  assert.equal(statuses.filter((s) => s === 200).length, 1, `one access: ${statuses}`);
  assert.ok(statuses.every((s) => s === 200 || s === 402), `${statuses}`);
  assert.equal(chain.balanceOf(DEVNET_USD, MERCHANT), balance + BigInt(PRICE));
});

test("a settle whose answer is lost: one transfer, found afterwards, and no access on a replay", async () => {
  const { pay, sent } = payingClient();
  const balance = chain.balanceOf(DEVNET_USD, MERCHANT);
  dropper.state.armed = true;
  const answer = await pay(`${resourceUrl}/weather`);
  assert.equal(dropper.state.dropped, 1, "the settle's answer was dropped");
  assert.notEqual(answer.status, 200, "the resource server heard no success");
  const { authorization } = decodePaymentSignatureHeader(sent[0]).payload;
  const found = await until("the payment to be findable and paid", async () => {
    const { status, body } = await api.merchant("GET", `/x402/payments/${NETWORK}/${authorization.from}/${authorization.nonce}`);
    return status === 200 && body.payment_intent.state === "succeeded" && body;
  });
  assert.equal(found.transactions.length, 1, JSON.stringify(found));
  assert.equal(found.payment_intent.amount, PRICE);
  paidOnce(await transfersIn(found.transactions[0]));
  const replay = await fetch(`${resourceUrl}/weather`, { headers: { "PAYMENT-SIGNATURE": sent[0] } });
  assert.equal(replay.status, 402);
  assert.equal(chain.balanceOf(DEVNET_USD, MERCHANT), balance + BigInt(PRICE));
});

test("a payment identifier made by x402's client is the settle's key: its payload settled again gets the same answer, another payload under it is refused", async () => {
  const paymentId = generatePaymentId();
  const { pay, sent } = payingClient({ hold: true, paymentId });
  assert.equal((await pay(`${resourceUrl}/weather-identified`)).status, 599);
  assert.equal((await pay(`${resourceUrl}/weather-identified`)).status, 599);
  const [first, second] = sent.map(decodePaymentSignatureHeader);
  assert.equal(first.extensions?.["payment-identifier"]?.info?.id, paymentId, JSON.stringify(first.extensions));
  assert.notEqual(first.payload.authorization.nonce, second.payload.authorization.nonce);
  const balance = chain.balanceOf(DEVNET_USD, MERCHANT);
  // The resource server's facilitator client, as a resource server whose answer was lost settles again.
  const facilitator = facilitatorAt(`${api.base}/x402`);
  const settled = await facilitator.settle(first, first.accepted);
  assert.equal(settled.success, true, JSON.stringify(settled));
  const again = await facilitator.settle(first, first.accepted);
  assert.deepEqual(again, settled);
  paidOnce(await transfersIn(settled.transaction));
  await assert.rejects(facilitator.settle(second, second.accepted), /409.*payment_identifier_reused/s);
  assert.equal(chain.balanceOf(DEVNET_USD, MERCHANT), balance + BigInt(PRICE));
});

// What docs/x402.md says of `settlement_pending`, checked against x402's own resource server:
// it takes the answer as final (402 to the client), while the payment we stored is still made.
test("x402's resource server takes settlement_pending as final: 402, and the stored payment is made once the chain mines", async () => {
  const impatient = await startApi("x402pending", chain, { REQUEST_TIMEOUT_SECONDS: "3" });
  const server = await startResource(`${impatient.base}/x402`);
  const before = chain.balanceOf(DEVNET_USD, MERCHANT);
  const { pay, sent } = payingClient();
  await chain.rpc("evm_setAutomine", [false]);
  let answer;
  try {
    answer = await pay(`${server.url}/weather`);
  } finally {
    await chain.rpc("evm_setAutomine", [true]);
    server.close();
  }
  assert.equal(answer.status, 402, "no resource for a pending settle");
  await chain.rpc("evm_mine");
  const { authorization } = decodePaymentSignatureHeader(sent[0]).payload;
  await until("the stored payment to be made", async () => {
    const { status, body } = await impatient.merchant("GET", `/x402/payments/${NETWORK}/${authorization.from}/${authorization.nonce}`);
    return status === 200 && body.payment_intent.state === "succeeded";
  });
  assert.equal(chain.balanceOf(DEVNET_USD, MERCHANT), before + BigInt(PRICE), "the payer paid");
  impatient.stop();
});

// ---- differential: the reference facilitator and ours, on the same bad payments --------------

/// A payment signed now, by the chain's clock.
async function signedPayment(options) {
  const latest = await chain.rpc("eth_getBlockByNumber", ["latest", false]);
  return signPayment({ now: Number(BigInt(latest.timestamp)), ...options });
}

test("the reference facilitator and ours give the same verdict and reason on the same bad payments", async () => {
  const wallet = walletOf(chain.url, SPARE_KEY);
  // The reference diagnoses a failed simulation through Multicall3, which every public chain has at
  // its canonical address: so does this one (the runtime code viem carries, past its constructor).
  await chain.rpc("anvil_setCode", ["0xcA11bde05977b3631167028862bE2a173976CA11", `0x${multicall3Bytecode.slice(2 + 64)}`]);
  const reference = new x402Facilitator().register(NETWORK, new ExactEvmFacilitator(toFacilitatorEvmSigner(wallet)));
  referenceFacilitator = { wallet, reference };

  // A nonce used on chain already: settled through ours first.
  const used = await signedPayment({});
  const settled = await api.merchant("POST", "/x402/settle", { x402Version: 2, paymentPayload: used.payload, paymentRequirements: used.required });
  assert.equal(settled.body.success, true, JSON.stringify(settled.body));

  const cases = {
    "a good payment": await signedPayment({}),
    "a good USDC payment": await signedPayment({ asset: USDC }),
    "signed by someone else": await signedPayment({ key: SPARE_KEY }),
    "paying someone else than payTo": await signedPayment({ change: (a) => (a.to = PAYER) }),
    "moving another value": await signedPayment({ change: (a) => (a.value = "9999") }),
    expired: await signedPayment({ change: (a) => (a.validBefore = "1") }),
    "not valid yet": await signedPayment({ change: (a) => (a.validAfter = String(2 ** 40)) }),
    "a used nonce": used,
    "signed for another token name": await signedPayment({ extra: { name: "Devnet Dollar", version: "1" } }),
    "signed for another USDC version": await signedPayment({ asset: USDC, extra: { name: "USD Coin", version: "9" } }),
  };
  for (const [what, { payload, required }] of Object.entries(cases)) {
    const theirs = await reference.verify(payload, required);
    const ours = await api.merchant("POST", "/x402/verify", { x402Version: 2, paymentPayload: payload, paymentRequirements: required });
    assert.equal(ours.status, 200, `${what}: ${JSON.stringify(ours.body)}`);
    assert.deepEqual(
      { isValid: ours.body.isValid, invalidReason: ours.body.invalidReason },
      { isValid: theirs.isValid, invalidReason: theirs.invalidReason },
      `${what}: ours ${JSON.stringify(ours.body)}, the reference's ${JSON.stringify(theirs)}`,
    );
  }
});

/// Each of `cases` (what: {payload, required}) is refused by the reference and by ours, with the
/// same reason.
async function sameRefusals(reference, cases) {
  for (const [what, { payload, required }] of Object.entries(cases)) {
    const theirs = await reference.verify(payload, required);
    const ours = await api.merchant("POST", "/x402/verify", { x402Version: 2, paymentPayload: payload, paymentRequirements: required });
    assert.equal(ours.status, 200, `${what}: ${JSON.stringify(ours.body)}`);
    assert.equal(theirs.isValid, false, `${what}: the reference's ${JSON.stringify(theirs)}`);
    assert.deepEqual(
      { isValid: ours.body.isValid, invalidReason: ours.body.invalidReason },
      { isValid: theirs.isValid, invalidReason: theirs.invalidReason },
      `${what}: ours ${JSON.stringify(ours.body)}, the reference's ${JSON.stringify(theirs)}`,
    );
  }
}

test("the reference facilitator and ours give the same reason on the same bad Permit2 payments; ours settles good ones once, exact and upto, for x402s own client and resource server", async () => {
  assert.ok(referenceFacilitator, "the EIP-3009 differential test ran first and made the reference facilitator");
  const { reference } = referenceFacilitator;
  const payer = walletOf(chain.url, PAYER_KEY);
  const spare = walletOf(chain.url, SPARE_KEY);
  // The payer approved Permit2 for one token, not for the other; the spare account approved it
  // for the first and holds none of it.
  const approved = await usdtLike(payer);
  const unapproved = await usdtLike(payer);
  await approvePermit2(payer, approved);
  await approvePermit2(spare, approved);
  // Payments made by x402's own client, as a resource server asking for Permit2 gets them.
  const permit2Payment = (options) => madePermit2Payment({ scheme: "exact", Client: ExactEvmClient, asset: approved, ...options });
  const cases = {
    "another spender than the exact proxy": await permit2Payment({ change: (a) => (a.spender = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002") }),
    "paying someone else than payTo": await permit2Payment({ change: (a) => (a.witness.to = PAYER) }),
    "a deadline past": await permit2Payment({ change: (a) => (a.deadline = "1") }),
    "not valid yet": await permit2Payment({ change: (a) => (a.witness.validAfter = String(2 ** 40)) }),
    "another amount": await permit2Payment({ change: (a) => (a.permitted.amount = "9999") }),
    "another token": await permit2Payment({ change: (a) => (a.permitted.token = DEVNET_USD) }),
    "signed by someone else": await permit2Payment({ change: (a) => (a.from = MERCHANT) }),
    "a token the payer did not approve Permit2 for": await permit2Payment({ asset: unapproved }),
    "a payer who holds too little": await permit2Payment({ key: SPARE_KEY }),
  };
  await sameRefusals(reference, cases);
  // A good one is valid to both, and our facilitator settles it, as x402's own facilitator
  // client asks it: the merchant is paid once, through x402's exact proxy.
  const good = await permit2Payment({});
  assert.equal((await reference.verify(good.payload, good.required)).isValid, true);
  const ours = await api.merchant("POST", "/x402/verify", { x402Version: 2, paymentPayload: good.payload, paymentRequirements: good.required });
  assert.deepEqual([ours.body.isValid, ours.body.payer], [true, PAYER], JSON.stringify(ours.body));
  const balanceOf = (who) => payer.readContract({
    address: approved, functionName: "balanceOf", args: [who],
    abi: [{ type: "function", name: "balanceOf", stateMutability: "view", inputs: [{ type: "address" }], outputs: [{ type: "uint256" }] }],
  });
  const before = await balanceOf(MERCHANT);
  const facilitator = facilitatorAt(`${api.base}/x402`);
  const settled = await facilitator.settle(good.payload, good.required);
  assert.equal(settled.success, true, JSON.stringify(settled));
  assert.equal(settled.payer, PAYER);
  const receipt = await payer.getTransactionReceipt({ hash: settled.transaction });
  assert.equal(receipt.to.toLowerCase(), "0x402085c248eea27d92e8b30b2c58ed07f9e20001");
  assert.equal(await balanceOf(MERCHANT), before + BigInt(PRICE));
  // Once: our second settle names the spent nonce, and the reference no longer calls it valid.
  const again = await facilitator.settle(good.payload, good.required);
  assert.deepEqual([again.success, again.errorReason, again.transaction], [false, "permit2_invalid_nonce", settled.transaction], JSON.stringify(again));
  assert.equal((await reference.verify(good.payload, good.required)).isValid, false);
  assert.equal(await balanceOf(MERCHANT), before + BigInt(PRICE));

  // The whole round, x402's own: @x402/express asks for the token by Permit2, @x402/fetch signs it,
  // our facilitator settles it through the exact proxy.
  const server = await startResource(`${api.base}/x402`, undefined, { permit2Asset: approved });
  try {
    const { pay } = payingClient({ assets: [approved] });
    const answer = await pay(`${server.url}/weather-permit2`);
    assert.equal(answer.status, 200, await answer.clone().text());
    assert.equal((await answer.json()).weather, "sunny, by Permit2");
    const paid = decodePaymentResponseHeader(answer.headers.get("payment-response"));
    assert.equal(paid.success, true, JSON.stringify(paid));
    const mined = await payer.getTransactionReceipt({ hash: paid.transaction });
    assert.equal(mined.to.toLowerCase(), "0x402085c248eea27d92e8b30b2c58ed07f9e20001");
    assert.equal(await balanceOf(MERCHANT), before + 2n * BigInt(PRICE));

    // upto, x402's own: the client allows PRICE, the route charges what it used, once.
    const metered = await pay(`${server.url}/metered`);
    assert.equal(metered.status, 200, await metered.clone().text());
    const charged = decodePaymentResponseHeader(metered.headers.get("payment-response"));
    assert.equal(charged.success, true, JSON.stringify(charged));
    assert.equal(charged.amount, METERED_CHARGE);
    const upto = await payer.getTransactionReceipt({ hash: charged.transaction });
    assert.equal(upto.to.toLowerCase(), "0x4020a4f3b7b90cca423b9fabcc0ce57c6c240002");
    assert.equal(await balanceOf(MERCHANT), before + 2n * BigInt(PRICE) + BigInt(METERED_CHARGE));
  } finally {
    server.close();
  }
});

test("the reference facilitator and ours give the same reason on the same bad upto payments, and both call a good one valid", async () => {
  const payer = walletOf(chain.url, PAYER_KEY);
  // The witness names the facilitator that may settle: ours is our relayer's key, so the
  // reference is given the same key (it only verifies here, sending nothing).
  const facilitatorAddress = privateKeyToAccount(RELAYER_KEY).address;
  // (`toFacilitatorEvmSigner` names the signer by the client's `address`.)
  const signer = toFacilitatorEvmSigner(Object.assign(walletOf(chain.url, RELAYER_KEY), { address: facilitatorAddress }));
  const reference = new x402Facilitator().register(NETWORK, new UptoEvmFacilitator(signer));
  const supported = await api.merchant("GET", "/x402/supported");
  const upto = supported.body.kinds.find((k) => k.scheme === "upto" && k.network === NETWORK);
  assert.equal(upto?.extra?.facilitatorAddress, facilitatorAddress, JSON.stringify(supported.body));
  // The reference diagnoses a failed simulation through Multicall3 (as in the first differential test).
  await chain.rpc("anvil_setCode", ["0xcA11bde05977b3631167028862bE2a173976CA11", `0x${multicall3Bytecode.slice(2 + 64)}`]);
  const approved = await usdtLike(payer);
  const unapproved = await usdtLike(payer);
  await approvePermit2(payer, approved);
  await approvePermit2(walletOf(chain.url, SPARE_KEY), approved);
  // Payments made by x402's own upto client: a ceiling of PRICE.
  const uptoPayment = (options) => madePermit2Payment({ scheme: "upto", Client: UptoEvmClient, asset: approved, extra: { facilitatorAddress }, ...options });
  const cases = {
    "another spender than the upto proxy": await uptoPayment({ change: (a) => (a.spender = "0x402085c248EeA27D92E8b30b2C58ed07f9E20001") }),
    "another facilitator than ours": await uptoPayment({ change: (a) => (a.witness.facilitator = PAYER) }),
    "paying someone else than payTo": await uptoPayment({ change: (a) => (a.witness.to = PAYER) }),
    "a deadline past": await uptoPayment({ change: (a) => (a.deadline = "1") }),
    "not valid yet": await uptoPayment({ change: (a) => (a.witness.validAfter = String(2 ** 40)) }),
    "another ceiling than the one asked": await uptoPayment({ change: (a) => (a.permitted.amount = "9999") }),
    "another token": await uptoPayment({ change: (a) => (a.permitted.token = DEVNET_USD) }),
    "signed by someone else": await uptoPayment({ change: (a) => (a.from = MERCHANT) }),
    "a token the payer did not approve Permit2 for": await uptoPayment({ asset: unapproved }),
    "a payer who holds too little": await uptoPayment({ key: SPARE_KEY }),
  };
  await sameRefusals(reference, cases);
  const good = await uptoPayment({});
  const theirs = await reference.verify(good.payload, good.required);
  const ours = await api.merchant("POST", "/x402/verify", { x402Version: 2, paymentPayload: good.payload, paymentRequirements: good.required });
  assert.deepEqual([theirs.isValid, theirs.payer], [true, PAYER], JSON.stringify(theirs));
  assert.deepEqual([ours.body.isValid, ours.body.payer], [true, PAYER], JSON.stringify(ours.body));
});

test("a payer who never approved Permit2 pays USDC by Permit2 with USDC's own EIP-2612 permit (eip2612GasSponsoring): the same verdicts as the reference's, both in one transaction, once", async () => {
  assert.ok(referenceFacilitator, "the EIP-3009 differential test ran first and made the reference facilitator");
  const { reference } = referenceFacilitator;
  const payer = walletOf(chain.url, PAYER_KEY);
  const PERMIT2 = "0x000000000022D473030F116dDEE9F6B43aC78BA3";
  const read = (functionName, args) => payer.readContract({
    address: USDC, functionName, args,
    abi: [{ type: "function", name: functionName, stateMutability: "view", inputs: args.map(() => ({ type: "address" })), outputs: [{ type: "uint256" }] }],
  });
  assert.equal(await read("allowance", [PAYER, PERMIT2]), 0n, "the payer never approved Permit2 for USDC");
  // x402's own client, told by the requirements that the facilitator sponsors EIP-2612 permits.
  const sponsored = (options) => madePermit2Payment({
    scheme: "exact", Client: ExactEvmClient, asset: USDC, extra: TOKENS[USDC], sponsoredAt: chain.url, ...options,
  });
  const resigned = (info) => (info.signature = `0x${"11".repeat(32)}${info.signature.slice(66)}`);
  const cases = {
    "a token permit of someone else": await sponsored({ changeTokenPermit: (i) => (i.from = MERCHANT) }),
    "a token permit for another asset": await sponsored({ changeTokenPermit: (i) => (i.asset = DEVNET_USD) }),
    "a token permit for another spender than Permit2": await sponsored({ changeTokenPermit: (i) => (i.spender = MERCHANT) }),
    "a token permit past its deadline": await sponsored({ changeTokenPermit: (i) => (i.deadline = "1") }),
    "a token permit whose amount is no number": await sponsored({ changeTokenPermit: (i) => (i.amount = "ten") }),
    "a token permit for another amount than the payment": await sponsored({ changeTokenPermit: (i) => (i.amount = "1") }),
    "a token permit not signed by the payer": await sponsored({ changeTokenPermit: resigned }),
  };
  await sameRefusals(reference, cases);

  const good = await sponsored({});
  assert.equal((await reference.verify(good.payload, good.required)).isValid, true);
  const ours = await api.merchant("POST", "/x402/verify", { x402Version: 2, paymentPayload: good.payload, paymentRequirements: good.required });
  assert.deepEqual([ours.body.isValid, ours.body.payer], [true, PAYER], JSON.stringify(ours.body));
  const supported = await api.merchant("GET", "/x402/supported");
  assert.ok(supported.body.extensions.includes("eip2612GasSponsoring"), JSON.stringify(supported.body));

  const before = await read("balanceOf", [MERCHANT]);
  const facilitator = facilitatorAt(`${api.base}/x402`);
  const settled = await facilitator.settle(good.payload, good.required);
  assert.equal(settled.success, true, JSON.stringify(settled));
  const receipt = await payer.getTransactionReceipt({ hash: settled.transaction });
  assert.equal(receipt.to.toLowerCase(), "0x402085c248eea27d92e8b30b2c58ed07f9e20001");
  const settledWithPermit = keccak256(toHex("SettledWithPermit()"));
  assert.ok(receipt.logs.some((log) => log.topics[0] === settledWithPermit), "settled through settleWithPermit");
  paidOnce(await transfersIn(settled.transaction));
  assert.equal(await read("balanceOf", [MERCHANT]), before + BigInt(PRICE));
  assert.equal(await read("allowance", [PAYER, PERMIT2]), 0n, "the permit let Permit2 move the payment, and it did");
  const again = await facilitator.settle(good.payload, good.required);
  assert.deepEqual([again.success, again.errorReason, again.transaction], [false, "permit2_invalid_nonce", settled.transaction], JSON.stringify(again));
  assert.equal(await read("balanceOf", [MERCHANT]), before + BigInt(PRICE));

  // The whole round, x402's own: @x402/express declares the extension, @x402/fetch signs both.
  const { pay } = payingClient({ assets: [USDC], rpcUrl: chain.url });
  const answer = await pay(`${resourceUrl}/weather-gasless`);
  assert.equal(answer.status, 200, await answer.clone().text());
  assert.equal((await answer.json()).weather, "sunny, without an approval");
  const paid = decodePaymentResponseHeader(answer.headers.get("payment-response"));
  assert.equal(paid.success, true, JSON.stringify(paid));
  const mined = await payer.getTransactionReceipt({ hash: paid.transaction });
  assert.ok(mined.logs.some((log) => log.topics[0] === settledWithPermit), "settled through settleWithPermit");
  assert.equal(await read("balanceOf", [MERCHANT]), before + 2n * BigInt(PRICE));
});

test("a smart wallet not deployed yet pays USDC through x402's own client (ERC-6492): the reference's verdicts, its factory allowed, deployed first, paid once", async () => {
  assert.ok(referenceFacilitator, "the EIP-3009 differential test ran first and placed Multicall3");
  const { wallet } = referenceFacilitator;
  await placeSmartWalletFactory(wallet, chain.rpc);
  const reference = new x402Facilitator().register(
    NETWORK,
    new ExactEvmFacilitator(toFacilitatorEvmSigner(wallet), { eip6492AllowedFactories: [SMART_WALLET_FACTORY] }),
  );
  const funder = walletOf(chain.url, PAYER_KEY);
  const erc20 = (functionName, inputs, outputs = []) => [{ type: "function", name: functionName, stateMutability: outputs.length ? "view" : "nonpayable", inputs, outputs }];
  const usdcOf = (address) => funder.readContract({ address: USDC, abi: erc20("balanceOf", [{ type: "address" }], [{ type: "uint256" }]), functionName: "balanceOf", args: [address] });
  /// A new owner's Coinbase Smart Wallet, undeployed, holding 3 × PRICE of USDC.
  const fundedSmartWallet = async () => {
    const account = await undeployedSmartWallet(wallet);
    const hash = await funder.writeContract({ address: USDC, abi: erc20("transfer", [{ type: "address" }, { type: "uint256" }]), functionName: "transfer", args: [account.address, 3n * BigInt(PRICE)] });
    await funder.waitForTransactionReceipt({ hash });
    assert.equal(await wallet.getCode({ address: account.address }), undefined, "not deployed");
    return account;
  };
  const account = await fundedSmartWallet();
  const required = { scheme: "exact", network: NETWORK, amount: PRICE, asset: USDC, payTo: MERCHANT, maxTimeoutSeconds: 60, extra: TOKENS[USDC] };
  const signed = async (signer) => {
    const created = await new ExactEvmClient(signer).createPaymentPayload(2, required);
    return { payload: { x402Version: 2, accepted: required, payload: created.payload }, required };
  };
  const good = await signed(account);
  const envelope = parseErc6492Signature(good.payload.payload.signature);
  assert.equal(envelope.address.toLowerCase(), SMART_WALLET_FACTORY.toLowerCase(), "x402's client signs with ERC-6492 for an undeployed wallet");
  const withEnvelope = (payment, change) => {
    const copy = structuredClone(payment);
    const parts = parseErc6492Signature(copy.payload.payload.signature);
    change(parts);
    copy.payload.payload.signature = serializeErc6492Signature(parts);
    return copy;
  };
  // Another owner's signature for this wallet, with this wallet's deployment.
  const foreign = await signed(await undeployedSmartWallet(wallet, { address: account.address }));
  await sameRefusals(reference, {
    "a factory not allowed": withEnvelope(good, (p) => (p.address = MERCHANT)),
    "another owner's signature": withEnvelope(foreign, (p) => (p.data = envelope.data)),
  });
  assert.equal((await reference.verify(good.payload, good.required)).isValid, true, "valid to the reference");
  const verified = await api.merchant("POST", "/x402/verify", { x402Version: 2, paymentPayload: good.payload, paymentRequirements: good.required });
  assert.deepEqual([verified.body.isValid, verified.body.payer], [true, account.address], JSON.stringify(verified.body));
  assert.equal(await wallet.getCode({ address: account.address }), undefined, "verify deploys nothing");

  // Settled: the wallet deployed first, then paid once.
  const before = await usdcOf(MERCHANT);
  const facilitator = facilitatorAt(`${api.base}/x402`);
  const settled = await facilitator.settle(good.payload, good.required);
  assert.equal(settled.success, true, JSON.stringify(settled));
  assert.equal(settled.payer, account.address);
  assert.ok(await wallet.getCode({ address: account.address }), "the settle deployed the wallet");
  paidOnce(await transfersIn(settled.transaction), account.address);
  assert.equal(await usdcOf(MERCHANT), before + BigInt(PRICE));
  const again = await facilitator.settle(good.payload, good.required);
  assert.equal(again.success, false, JSON.stringify(again));
  assert.equal(again.transaction, settled.transaction, "a second settle names the first one's transfer");
  assert.equal(await usdcOf(MERCHANT), before + BigInt(PRICE));

  // The whole round, x402's own: @x402/fetch pays from another undeployed wallet.
  const second = await fundedSmartWallet();
  const { pay } = payingClient({ signer: second, assets: [USDC] });
  const answer = await pay(`${resourceUrl}/weather-usdc`);
  assert.equal(answer.status, 200, await answer.clone().text());
  const paid = decodePaymentResponseHeader(answer.headers.get("payment-response"));
  assert.deepEqual([paid.success, paid.payer], [true, second.address], JSON.stringify(paid));
  assert.ok(await wallet.getCode({ address: second.address }), "deployed by the settle");
  assert.equal(await usdcOf(second.address), 2n * BigInt(PRICE));
  assert.equal(await usdcOf(MERCHANT), before + 2n * BigInt(PRICE));
});
