// The refund page's wallet step (docs/dashboard.md, "Refunds"): the wallet of the address that was
// paid, found by EIP-6963, signs the refund's EIP-3009 authorization as the server builds it; the
// signature goes back with the session's CSRF token, and the server checks it and queues the
// transfer. Nothing here decides an amount or an address: the server's document is what is signed.
const section = document.getElementById("refund-signing");

if (section) {
  const announced = [];
  window.addEventListener("eip6963:announceProvider", (event) => {
    if (event.detail?.provider) announced.push(event.detail);
  });
  const words = JSON.parse(section.dataset.words);
  const button = document.getElementById("sign-refund");
  const say = (text) => { document.getElementById("refund-status").textContent = text; };
  const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  async function findWallet() {
    window.dispatchEvent(new Event("eip6963:requestProvider"));
    await pause(200);
    return announced[0]?.provider ?? window.ethereum ?? null;
  }

  async function sign() {
    const wallet = await findWallet();
    if (!wallet) return say(words.no_wallet);
    const [account] = await wallet.request({ method: "eth_requestAccounts" });
    const signer = section.dataset.signer;
    if (String(account).toLowerCase() !== signer.toLowerCase()) return say(`${words.wrong_account} ${signer}`);
    const chainId = `0x${Number(section.dataset.chainId).toString(16)}`;
    if (String(await wallet.request({ method: "eth_chainId" })).toLowerCase() !== chainId) {
      await wallet.request({ method: "wallet_switchEthereumChain", params: [{ chainId }] });
    }
    const answer = await fetch(section.dataset.authorization, { credentials: "same-origin" });
    if (!answer.ok) return say(`${words.refused} (${answer.status})`);
    const { typed_data } = await answer.json();
    say(words.signing);
    const signature = await wallet.request({ method: "eth_signTypedData_v4", params: [account, JSON.stringify(typed_data)] });
    const body = new URLSearchParams({ csrf: section.dataset.csrf, signature });
    const sent = await fetch(section.dataset.confirm, { method: "POST", body, credentials: "same-origin", redirect: "manual" });
    // A 303 back to this page: the refund is processing now. A lost answer is safe to retry: a
    // second confirm of the same refund is refused, never paid twice.
    if (sent.type === "opaqueredirect" || sent.ok) return location.reload();
    say(`${words.refused} (${sent.status})`);
  }

  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await sign();
    } catch (error) {
      say(error?.code === 4001 ? words.rejected : `${words.failed} ${error?.message ?? error}`);
    } finally {
      button.disabled = false;
    }
  });
}
