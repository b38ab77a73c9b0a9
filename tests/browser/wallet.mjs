// The browser suites' test wallet: an EIP-1193 provider announced by EIP-6963 in every page of a
// context, whose requests the test answers, signing with anvil's dev accounts (anvil's own
// eth_signTypedData_v4), so what a page has signed is checked by code that is not ours.

// Runs in the page before its own script; requests go to the test through window.__wallet,
// exposed by Playwright, which no page CSP blocks.
function injectedWallet() {
  const provider = {
    isTestWallet: true,
    listeners: {},
    on(event, listener) { (this.listeners[event] ??= []).push(listener); },
    removeListener() {},
    async request({ method, params }) {
      const answer = await window.__wallet(method, params ?? []);
      if (answer.error) throw Object.assign(new Error(answer.error.message), { code: answer.error.code });
      return answer.result;
    },
  };
  const info = { uuid: "5b3f2c8e-0000-4000-8000-000000000001", name: "Test Wallet", icon: "data:image/svg+xml,<svg xmlns='http://www.w3.org/2000/svg'/>", rdns: "dev.payments-api.test" };
  const announce = () => window.dispatchEvent(new CustomEvent("eip6963:announceProvider", { detail: Object.freeze({ info, provider }) }));
  window.addEventListener("eip6963:requestProvider", announce);
  announce();
}

/// Gives every page of `context` a wallet of `account` on `chainId` (hex) that switches chains
/// when asked and signs and sends through `rpc` on chain 31337 only (anvil's dev accounts are
/// unlocked); `reject` declines every signature (EIP-1193 4001). The wallet's state, with the
/// chains it was switched to, the transactions it sent and the typed data it signed; while
/// `holdSends` (`holdSignatures`) is a promise, a send (a signature) waits for it, as a payer
/// reading the wallet's prompt does.
export async function withWallet(context, rpc, { account, chainId = "0x1", reject = false }) {
  const wallet = { account, chainId, reject, switched: [], sent: [], signed: [], holdSends: null, holdSignatures: null };
  await context.exposeBinding("__wallet", async (_source, method, params) => {
    switch (method) {
      case "eth_requestAccounts":
      case "eth_accounts":
        return { result: [wallet.account] };
      case "eth_chainId":
        return { result: wallet.chainId };
      case "wallet_switchEthereumChain":
        wallet.chainId = params[0].chainId;
        wallet.switched.push(params[0].chainId);
        return { result: null };
      case "eth_signTypedData_v4":
        if (wallet.reject) return { error: { code: 4001, message: "User rejected the request." } };
        if (wallet.chainId !== "0x7a69") return { error: { code: 4901, message: "wrong chain" } };
        await wallet.holdSignatures;
        wallet.signed.push(JSON.parse(params[1]));
        try {
          return { result: await rpc("eth_signTypedData_v4", [params[0], params[1]]) };
        } catch (e) {
          return { error: { code: -32603, message: e.message } };
        }
      case "eth_sendTransaction":
        if (wallet.reject) return { error: { code: 4001, message: "User rejected the request." } };
        if (wallet.chainId !== "0x7a69") return { error: { code: 4901, message: "wrong chain" } };
        await wallet.holdSends;
        wallet.sent.push(params[0]);
        try {
          return { result: await rpc("eth_sendTransaction", [{ ...params[0], from: wallet.account }]) };
        } catch (e) {
          return { error: { code: -32603, message: e.message } };
        }
      case "eth_getTransactionReceipt":
        return { result: await rpc("eth_getTransactionReceipt", params) };
      default:
        return { error: { code: 4200, message: `unsupported ${method}` } };
    }
  });
  await context.addInitScript(injectedWallet);
  return wallet;
}
