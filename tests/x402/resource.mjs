// The x402 parties of the suite and the bench, built from x402's own packages, unmodified: a
// resource server in express whose facilitator is our /x402, and a paying client.

import express from "express";
import { paymentMiddleware, setSettlementOverrides, x402ResourceServer } from "@x402/express";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { wrapFetchWithPayment, x402Client } from "@x402/fetch";
import {
  PAYMENT_IDENTIFIER, appendPaymentIdentifierToExtensions, declarePaymentIdentifierExtension,
  paymentIdentifierResourceServerExtension,
} from "@x402/extensions/payment-identifier";
import { declareEip2612GasSponsoringExtension } from "@x402/extensions";
import { ExactEvmScheme as ExactEvmClient } from "@x402/evm";
import { ExactEvmScheme as ExactEvmServer } from "@x402/evm/exact/server";
import { UptoEvmScheme as UptoEvmClient } from "@x402/evm/upto/client";
import { UptoEvmScheme as UptoEvmServer } from "@x402/evm/upto/server";
import { readFileSync } from "node:fs";
import { createWalletClient, defineChain, http, publicActions, toHex } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { toCoinbaseSmartAccount } from "viem/account-abstraction";
import { freePort, MERCHANT, MERCHANT_TOKEN, PAYER, PAYER_KEY, DEVNET_USD, USDC } from "../node/stack.mjs";

export const NETWORK = "eip155:31337";
export const PRICE = "10000";
/// What `/metered` charges of its ceiling, PRICE.
export const METERED_CHARGE = "2500";
/// The tokens a route may cost, with the EIP-712 domain a payer signs for.
export const TOKENS = {
  [DEVNET_USD]: { name: "Devnet USD", version: "1" },
  [USDC]: { name: "USD Coin", version: "2" },
};

/// A facilitator client as a merchant configures it: our /x402 at `url`, the merchant's API key.
export function facilitatorAt(url) {
  return new HTTPFacilitatorClient({
    url,
    createAuthHeaders: async () => {
      const auth = { Authorization: `Bearer ${MERCHANT_TOKEN}` };
      return { verify: auth, settle: auth, supported: auth };
    },
  });
}

/// The resource server of docs/x402.md: an express app whose routes cost PRICE of a token. `facilitator`
/// is the facilitator client it asks (default: ours at `facilitatorUrl`). With `permit2Asset`, a
/// route `/weather-permit2` costs PRICE of that token, paid by Permit2, and `/metered` (x402's
/// `upto`) allows at most PRICE of it and charges a quarter, what the call used.
export async function startResource(facilitatorUrl, facilitator = facilitatorAt(facilitatorUrl), { permit2Asset } = {}) {
  const server = new x402ResourceServer(facilitator)
    .register(NETWORK, new ExactEvmServer())
    .registerExtension(paymentIdentifierResourceServerExtension);
  if (permit2Asset) server.register(NETWORK, new UptoEvmServer());
  const route = (asset, extensions, extra = TOKENS[asset]) => ({
    accepts: { scheme: "exact", network: NETWORK, payTo: MERCHANT, price: { amount: PRICE, asset, extra } },
    description: "The weather, paid per call",
    extensions,
  });
  const app = express();
  app.use(paymentMiddleware({
    "GET /weather": route(DEVNET_USD),
    "GET /weather-usdc": route(USDC),
    // A route that asks its clients for a payment identifier (x402's payment-identifier extension).
    "GET /weather-identified": route(DEVNET_USD, { [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false) }),
    // USDC by Permit2, where a payer who never approved Permit2 signs USDC's EIP-2612 permit for it
    // and the facilitator submits both (x402's eip2612GasSponsoring extension).
    "GET /weather-gasless": route(USDC, declareEip2612GasSponsoringExtension(), { assetTransferMethod: "permit2", ...TOKENS[USDC] }),
    ...(permit2Asset && {
      "GET /weather-permit2": route(permit2Asset, undefined, { assetTransferMethod: "permit2" }),
      "GET /metered": {
        accepts: { scheme: "upto", network: NETWORK, payTo: MERCHANT, price: { amount: PRICE, asset: permit2Asset, extra: { assetTransferMethod: "permit2" } } },
        description: "Tokens of a model, paid for what was used",
      },
    }),
  }, server));
  app.get("/weather", (_req, res) => res.json({ weather: "sunny" }));
  app.get("/weather-usdc", (_req, res) => res.json({ weather: "sunny, in USDC" }));
  app.get("/weather-identified", (_req, res) => res.json({ weather: "sunny, identified" }));
  app.get("/weather-gasless", (_req, res) => res.json({ weather: "sunny, without an approval" }));
  app.get("/weather-permit2", (_req, res) => res.json({ weather: "sunny, by Permit2" }));
  app.get("/metered", (_req, res) => {
    setSettlementOverrides(res, { amount: METERED_CHARGE });
    res.json({ tokens: 250 });
  });
  const port = await freePort();
  const listening = app.listen(port, "127.0.0.1");
  await new Promise((resolve) => listening.once("listening", resolve));
  return { url: `http://127.0.0.1:${port}`, close: () => listening.close() };
}

/// A paying client; `sent` records every PAYMENT-SIGNATURE it sends. With `hold`, the paid retry is
/// not sent at all (the caller answers it), so the signed header can be used as the caller likes.
/// With `paymentId`, every payment it makes carries that payment identifier where a route asks for
/// one, as x402's documentation shows a client doing it. `assets` are what it agrees to pay in. With
/// `rpcUrl`, it reads the chain there: what it needs to sign a token's EIP-2612 permit for Permit2.
/// With `signer` (a viem account: a smart wallet's, say), it signs with that instead of `key`'s.
export function payingClient({ hold = false, key = PAYER_KEY, signer = privateKeyToAccount(key), paymentId, assets = Object.keys(TOKENS), rpcUrl } = {}) {
  const sent = [];
  const transport = async (input, init) => {
    const request = new Request(input, init);
    const signature = request.headers.get("payment-signature");
    if (signature) {
      sent.push(signature);
      if (hold) return new Response("held by the caller", { status: 599 });
    }
    return fetch(request);
  };
  const client = x402Client.fromConfig({
    schemes: [
      { network: NETWORK, client: new ExactEvmClient(signer, rpcUrl && { rpcUrl }) },
      { network: NETWORK, client: new UptoEvmClient(signer) },
    ],
    // A devnet's tokens are no default asset of x402's: the payer names what it will pay in.
    spendControls: {
      allowedAssets: assets.map((asset) => ({ network: NETWORK, asset, maxAmountPerPayment: PRICE })),
    },
  });
  if (paymentId) {
    client.onBeforePaymentCreation(async ({ paymentRequired }) => {
      if (paymentRequired.extensions) appendPaymentIdentifierToExtensions(paymentRequired.extensions, paymentId);
    });
  }
  const pay = wrapFetchWithPayment(transport, client);
  return { pay, sent };
}

/// A payment at the chain time `now`, signed by `key` over the domain of `extra` (default: the token's own), for the
/// requirements `required`; `change` alters the authorization before it is signed.
export async function signPayment({ now, key = PAYER_KEY, asset = DEVNET_USD, extra = TOKENS[asset], change = () => {}, requirements = () => {} }) {
  const required = { scheme: "exact", network: NETWORK, amount: PRICE, asset, payTo: MERCHANT, maxTimeoutSeconds: 60, extra };
  requirements(required);
  const authorization = {
    from: PAYER, to: MERCHANT, value: PRICE, validAfter: String(now - 600), validBefore: String(now + 600),
    nonce: toHex(crypto.getRandomValues(new Uint8Array(32))),
  };
  change(authorization);
  const signature = await privateKeyToAccount(key).signTypedData({
    domain: { name: extra.name, version: extra.version, chainId: 31337, verifyingContract: asset },
    types: {
      TransferWithAuthorization: [
        { name: "from", type: "address" }, { name: "to", type: "address" }, { name: "value", type: "uint256" },
        { name: "validAfter", type: "uint256" }, { name: "validBefore", type: "uint256" }, { name: "nonce", type: "bytes32" },
      ],
    },
    primaryType: "TransferWithAuthorization",
    message: authorization,
  });
  const payload = { x402Version: 2, accepted: required, payload: { signature, authorization } };
  return { payload, required, body: { x402Version: 2, paymentPayload: payload, paymentRequirements: required } };
}


/// A viem wallet of `key` on the anvil at `url`.
export function walletOf(url, key) {
  const anvil = defineChain({ id: 31337, name: "anvil", nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 }, rpcUrls: { default: { http: [url] } } });
  return createWalletClient({ account: privateKeyToAccount(key), chain: anvil, transport: http(url) }).extend(publicActions);
}

/// A token like Tether's (its `transfer` returns nothing, it has no EIP-3009), deployed by
/// `wallet`'s account, which holds 1 000 000 of it.
export async function usdtLike(wallet) {
  const artifact = JSON.parse(readFileSync(new URL("../../contracts/build/NoReturnToken.json", import.meta.url)));
  const hash = await wallet.deployContract({ abi: artifact.abi, bytecode: artifact.bytecode, args: [[wallet.account.address], 10n ** 12n] });
  const { contractAddress } = await wallet.waitForTransactionReceipt({ hash });
  return contractAddress;
}

/// `wallet` lets Permit2 move all of its `token`.
export async function approvePermit2(wallet, token) {
  const hash = await wallet.writeContract({
    address: token, functionName: "approve", args: ["0x000000000022D473030F116dDEE9F6B43aC78BA3", 2n ** 256n - 1n],
    abi: [{ type: "function", name: "approve", stateMutability: "nonpayable", inputs: [{ type: "address" }, { type: "uint256" }], outputs: [] }],
  });
  await wallet.waitForTransactionReceipt({ hash });
}

/// A payment of PRICE in `asset` to MERCHANT made by x402's own `Client` of `scheme` for
/// requirements asking for Permit2; `change` alters its permit after signing. With `sponsoredAt`
/// (the chain's URL), the requirements declare x402's eip2612GasSponsoring and carry the token's
/// domain, so a payer short of allowance also signs the token's permit for Permit2, which
/// `changeTokenPermit` may alter.
export async function madePermit2Payment({ scheme, Client, asset, extra = {}, key = PAYER_KEY, change = () => {}, sponsoredAt, changeTokenPermit = () => {} }) {
  const required = { scheme, network: NETWORK, amount: PRICE, asset, payTo: MERCHANT, maxTimeoutSeconds: 60, extra: { assetTransferMethod: "permit2", ...extra } };
  const client = new Client(privateKeyToAccount(key), sponsoredAt && { rpcUrl: sponsoredAt });
  const context = sponsoredAt && { extensions: declareEip2612GasSponsoringExtension() };
  const created = await client.createPaymentPayload(2, required, context);
  if (!created.payload.permit2Authorization) throw new Error(`not a Permit2 payment: ${JSON.stringify(created)}`);
  change(created.payload.permit2Authorization);
  const { extensions } = created;
  if (sponsoredAt && !extensions?.eip2612GasSponsoring) throw new Error(`no token permit: ${JSON.stringify(created)}`);
  if (extensions?.eip2612GasSponsoring) changeTokenPermit(extensions.eip2612GasSponsoring.info);
  return { payload: { x402Version: 2, accepted: required, payload: created.payload, ...(extensions && { extensions }) }, required };
}

/// Where viem's `toCoinbaseSmartAccount` (version 1.1) finds Coinbase Smart Wallet's factory.
export const SMART_WALLET_FACTORY = "0xBA5ED110eFDBa3D005bfC882d75358ACBbB85842";

/// Coinbase Smart Wallet on the chain of `wallet` as on every public chain: its implementation
/// deployed by `wallet`'s account, its factory's runtime written at SMART_WALLET_FACTORY with its
/// `implementation` immutable set to it (contracts/vendor/smart-wallet/README.md).
export async function placeSmartWalletFactory(wallet, rpc) {
  const artifact = (name) => JSON.parse(readFileSync(new URL(`../../contracts/build/${name}.json`, import.meta.url)));
  const implementation = artifact("CoinbaseSmartWallet");
  const hash = await wallet.deployContract({ abi: implementation.abi, bytecode: implementation.bytecode });
  const { contractAddress } = await wallet.waitForTransactionReceipt({ hash });
  const factory = artifact("CoinbaseSmartWalletFactory");
  const code = Buffer.from(factory.deployedBytecode.slice(2), "hex");
  const word = Buffer.from(contractAddress.slice(2).toLowerCase().padStart(64, "0"), "hex");
  for (const { start, length } of factory.immutableReferences.implementation) word.copy(code, start, 0, length);
  await rpc("anvil_setCode", [SMART_WALLET_FACTORY, `0x${code.toString("hex")}`]);
}

/// A Coinbase Smart Wallet of a new owner key, not deployed: viem's account, which signs with
/// ERC-6492 while its wallet has no code. With `address`, it signs as the wallet at that address
/// (one it does not own).
export async function undeployedSmartWallet(wallet, { address } = {}) {
  const owner = privateKeyToAccount(generatePrivateKey());
  return toCoinbaseSmartAccount({ client: wallet, owners: [owner], version: "1.1", address });
}
