// The checkout page's one script (docs/checkout.md). It reads the intent's client secret from the
// URL's fragment (never sent to a server), shows the intent, connects a wallet found by EIP-6963
// (or window.ethereum), asks it to sign the intent's EIP-712 document and confirms the signature,
// retrying with the same Idempotency-Key until it has an answer; then it follows the intent live.
// A deposit intent is paid by a plain transfer instead: the page shows its address, the exact
// amount and an EIP-681 QR code, and what arrived and how many confirmations it has. An order
// lists its options (network, token, amount, way to pay): the payer picks one, and the page then
// pays it as it pays an intent made that way; once the server chose an option, only it is shown.
"use strict";

const STRINGS = {
  en: {
    title: "Checkout",
    pay_to: "Pay to",
    amount: "Amount",
    network: "Network",
    recipient: "Recipient",
    payer: "Pay from",
    expires: "Expires in",
    connect: "Connect wallet",
    connecting: "Connecting…",
    pay: "Pay {amount}",
    paying: "Waiting for your signature…",
    sending: "Sending your payment…",
    secure: "Paid on chain with an authorization you sign. Your keys never leave your wallet.",
    no_wallet: "No wallet found in this browser. Install a wallet extension, or open this page in your wallet's browser.",
    connected: "Connected as {account}.",
    wrong_account: "This wallet account is {account}, but this payment must come from {payer}. Switch accounts in your wallet.",
    wrong_chain: "Your wallet could not switch to {chain}. Add that network to your wallet and try again.",
    rejected: "You declined the signature. Nothing was sent; you can try again.",
    connect_rejected: "You declined the connection request.",
    connect_failed: "The wallet did not connect: {detail}",
    gave_up: "The payment could not be confirmed for now. Reload this page to see where it stands.",
    failed_to_send: "The payment could not be confirmed: {detail}",
    created: "Waiting for your payment.",
    processing: "Payment sent. Waiting for confirmation on chain…",
    pending: "Payment sent, but the token does not accept it yet: {reason}. It is retried until the request expires.",
    succeeded: "Paid. Transaction {hash}",
    refunded_part: "Paid, and {refunded} of it refunded to you. Transaction {hash}",
    refunded_all: "Paid, and refunded to you in full ({refunded}). Transaction {hash}",
    loading: "Loading this payment…",
    failed: "This payment failed: {reason}.",
    canceled: "The merchant canceled this payment request.",
    expired: "This payment request expired.",
    unavailable: "This checkout link is not valid.",
    offline: "Reconnecting…",
    send_to: "Send to this address",
    copy: "Copy address",
    copied: "Copied",
    deposit_hint: "Send exactly {amount} on {chain} from any wallet or exchange. Scan the code with a wallet, or copy the address.",
    deposit_secure: "Sent to an address of this payment alone, which can only pay the merchant.",
    deposit_waiting: "Waiting for your transfer.",
    deposit_partial: "Received {received} of {amount}. Send the remaining {due} to the same address.",
    deposit_confirming: "{amount} seen on chain: {confirmations} of {required} confirmations.",
    deposit_finalizing: "{amount} seen on chain: {confirmations} confirmations, waiting for the chain to finalize it.",
    deposit_overpaid: "Paid, with {overpaid} more than asked. Transaction {hash}",
    choose: "Choose how to pay",
    by_signature: "sign in your wallet",
    by_transfer: "send to an address",
    approving: "{token} has no signed transfers, so it is paid through Permit2, Uniswap's contract for paying by signature. Approve it in your wallet to move {amount}; then you sign the payment.",
    approval_mining: "Waiting for your approval to be confirmed on chain…",
    approval_failed: "the approval transaction failed on chain",
    approval_slow: "the approval was not confirmed on chain within 3 minutes; pay again once your wallet shows it confirmed",
    permitting: "{token} has no signed transfers, so it is paid through Permit2, Uniswap's contract for paying by signature. First sign a permit letting it move {amount}: a signature, not a transaction, so no fee. Then you sign the payment.",
    reasons: {
      authorization_expired: "the authorization expired",
      nonce_used_otherwise: "the authorization was used for another transfer",
      authorization_canceled: "the authorization was canceled",
      insufficient_balance: "the balance is too low",
      token_paused: "the token is paused",
      account_blacklisted: "an account is blocked by the token",
    },
  },
  "zh-TW": {
    title: "結帳",
    pay_to: "付款給",
    amount: "金額",
    network: "網路",
    recipient: "收款地址",
    payer: "付款地址",
    expires: "剩餘時間",
    connect: "連接錢包",
    connecting: "連接中…",
    pay: "支付 {amount}",
    paying: "請在錢包中簽署…",
    sending: "正在送出付款…",
    secure: "以您簽署的授權在鏈上付款，私鑰不會離開您的錢包。",
    no_wallet: "此瀏覽器中找不到錢包。請安裝錢包擴充功能，或在錢包的瀏覽器中開啟此頁。",
    connected: "已連接：{account}。",
    wrong_account: "目前的錢包帳戶是 {account}，但這筆付款必須由 {payer} 支付。請在錢包中切換帳戶。",
    wrong_chain: "錢包無法切換到 {chain}。請先在錢包中加入該網路，再試一次。",
    rejected: "您拒絕了簽署，沒有送出任何交易，可以再試一次。",
    connect_rejected: "您拒絕了連接要求。",
    connect_failed: "錢包未能連接：{detail}",
    gave_up: "暫時無法確認付款。請重新整理此頁查看付款狀態。",
    failed_to_send: "無法確認付款：{detail}",
    created: "等待付款。",
    processing: "付款已送出，等待鏈上確認…",
    pending: "付款已送出，但代幣暫時不接受：{reason}。到期前會持續重試。",
    succeeded: "已付款。交易 {hash}",
    refunded_part: "已付款，其中 {refunded} 已退款給您。交易 {hash}",
    refunded_all: "已付款，並已全額退款給您（{refunded}）。交易 {hash}",
    loading: "正在載入這筆付款…",
    failed: "付款失敗：{reason}。",
    canceled: "商家已取消這筆付款要求。",
    expired: "這筆付款要求已過期。",
    unavailable: "這個結帳連結無效。",
    offline: "重新連線中…",
    send_to: "轉帳到此地址",
    copy: "複製地址",
    copied: "已複製",
    deposit_hint: "請在 {chain} 上從任何錢包或交易所轉入剛好 {amount}。可用錢包掃描條碼，或複製地址。",
    deposit_secure: "款項轉入這筆付款專屬的地址，只能轉給商家。",
    deposit_waiting: "等待您的轉帳。",
    deposit_partial: "已收到 {received}，共 {amount}。請將其餘的 {due} 轉到同一個地址。",
    deposit_confirming: "鏈上已看到 {amount}：已確認 {confirmations}／{required}。",
    deposit_finalizing: "鏈上已看到 {amount}：已確認 {confirmations} 次，等待鏈上最終確定。",
    deposit_overpaid: "已付款，比要求多了 {overpaid}。交易 {hash}",
    choose: "選擇付款方式",
    by_signature: "以錢包簽署",
    by_transfer: "轉帳到地址",
    approving: "{token} 不支援簽署轉帳，因此透過 Permit2（Uniswap 的簽署付款合約）付款。請先在錢包中核准它動用 {amount}，接著再簽署付款。",
    approval_mining: "等待您的核准在鏈上確認…",
    approval_failed: "核准交易在鏈上失敗",
    approval_slow: "核准交易三分鐘內未在鏈上確認；待錢包顯示已確認後再付款一次",
    permitting: "{token} 不支援簽署轉帳，因此透過 Permit2（Uniswap 的簽署付款合約）付款。請先簽署許可，讓它動用 {amount}：這是簽章而非交易，不需手續費。接著再簽署付款。",
    reasons: {
      authorization_expired: "授權已過期",
      nonce_used_otherwise: "授權已被用於另一筆轉帳",
      authorization_canceled: "授權已被取消",
      insufficient_balance: "餘額不足",
      token_paused: "代幣已暫停",
      account_blacklisted: "帳戶已被代幣封鎖",
    },
  },
};

const $ = (id) => document.getElementById(id);
const id = location.pathname.split("/").filter(Boolean).pop();
const secret = (() => {
  try {
    return decodeURIComponent(location.hash.slice(1));
  } catch {
    return "";
  }
})();
let lang = pickLanguage();
let view = null;
let wallet = null;
let account = null;
let note = null; // [key, values] of the note under the buttons
let statusOverride = null; // [key, values] shown instead of the intent's state, until it changes
let inFlight = false; // a payment under way (approval, signature, confirm): Pay stays disabled
let choice = null; // the order's option the payer picked here, until the server chose one
let optionsShown = ""; // what the option list was last built for

function pickLanguage() {
  const chosen = localStorage.getItem("checkout.lang");
  if (chosen && STRINGS[chosen]) return chosen;
  return STRINGS[document.documentElement.lang] ? document.documentElement.lang : "en";
}

function t(key, values = {}) {
  const text = STRINGS[lang][key] ?? STRINGS.en[key] ?? key;
  return text.replace(/\{(\w+)\}/g, (_, name) => values[name] ?? "");
}

function reason(code) {
  return STRINGS[lang].reasons[code] ?? code ?? "";
}

function short(address) {
  return address ? `${address.slice(0, 6)}…${address.slice(-4)}` : "";
}

function amountText() {
  const p = paying();
  return p ? units(p.amount) : "";
}

// An order whose option the server has not chosen yet: the payer picks one here.
function unchosenOrder() {
  return Boolean(view && view.currency && !view.selected_option);
}

// What is being paid: the intent itself, or the option of an order the payer picked on this page,
// as an intent made that way would read (the server chooses it only when it is paid).
function paying() {
  if (!unchosenOrder()) return view;
  const option = view.payment_options.find((o) => o.id === choice);
  if (!option) return view;
  return {
    ...view, chain: option.chain, chain_id: option.chain_id, token: option.token, amount: option.amount,
    symbol: option.symbol, decimals: option.decimals, amount_display: option.amount_display,
    payment_method: option.payment_method, deposit_address: option.deposit_address,
    payment_uri: option.payment_uri, payment_qr_svg: option.payment_qr_svg,
    amount_received: "0", amount_confirming: "0", confirmations: null,
  };
}

// Base units in the token's units, with its symbol, when the token says its decimals.
function units(baseUnits) {
  const p = paying();
  if (!p) return "";
  if (p.decimals == null) return `${baseUnits} (base units)`;
  const digits = String(baseUnits).padStart(p.decimals + 1, "0");
  const whole = digits.slice(0, digits.length - p.decimals);
  let fraction = digits.slice(digits.length - p.decimals).replace(/0+$/, "");
  fraction = fraction.padEnd(Math.min(2, p.decimals), "0");
  return `${fraction ? `${whole}.${fraction}` : whole} ${p.symbol ?? ""}`.trim();
}

function byDeposit() {
  return paying()?.payment_method === "deposit_address";
}

function due() {
  const p = paying();
  if (!p || p.decimals == null) return "0";
  const left = BigInt(p.amount) - BigInt(p.amount_received);
  return left > 0n ? left.toString() : "0";
}

// ---- rendering -------------------------------------------------------------------------------

function render() {
  document.documentElement.lang = lang;
  document.title = view ? `${t("title")} · ${view.merchant_name}` : t("title");
  for (const element of document.querySelectorAll("[data-t]")) {
    element.textContent = t(element.dataset.t);
  }
  for (const button of document.querySelectorAll("[data-lang]")) {
    button.setAttribute("aria-pressed", String(button.dataset.lang === lang));
  }
  const p = paying();
  if (view) {
    const priced = unchosenOrder() && p === view;
    $("merchant").textContent = view.merchant_name;
    $("amount").textContent = p.amount_display ?? p.amount;
    $("symbol").textContent = priced ? view.currency.toUpperCase() : p.amount_display ? p.symbol ?? "" : "";
    $("chain").textContent = p.chain_id ? chainName(p.chain_id) : "—";
    $("recipient").textContent = short(view.merchant);
    $("recipient").title = view.merchant;
    $("payer").textContent = short(view.payer ?? account);
    $("payer").title = view.payer ?? account ?? "";
    $("payer-row").hidden = byDeposit() || !(view.payer ?? account);
    $("foot").textContent = t(byDeposit() ? "deposit_secure" : "secure");
  }
  renderOptions();
  renderDeposit();
  const picked = !unchosenOrder() || p !== view;
  const payable = view && view.state === "created" && !expired() && !byDeposit() && picked;
  $("connect").hidden = Boolean(account) || !payable;
  $("connect").disabled = !payable;
  $("pay").hidden = !account || !payable;
  $("pay").disabled = inFlight || !payable || !rightAccount();
  $("pay").textContent = t("pay", { amount: amountText() });
  $("account").textContent = note ? t(note[0], note[1]) : "";
  renderStatus();
  renderCountdown();
}

// An order's options, while the payer may pick one: a radio group, rebuilt only when what it shows
// changes (so focus stays where the payer left it).
function renderOptions() {
  const open = unchosenOrder() && view.state === "created" && !expired();
  $("options").hidden = !open;
  if (!open) return;
  const key = `${lang}|${view.payment_options.map((o) => o.id).join(",")}`;
  if (key !== optionsShown) {
    optionsShown = key;
    $("options-title").textContent = t("choose");
    $("option-list").replaceChildren(...view.payment_options.map((option) => {
      const label = document.createElement("label");
      label.className = "option";
      const input = document.createElement("input");
      input.type = "radio";
      input.name = "option";
      input.value = option.id;
      input.addEventListener("change", () => {
        choice = option.id;
        note = null;
        render();
      });
      const amount = document.createElement("span");
      amount.className = "option-amount";
      amount.textContent = `${option.amount_display} ${option.symbol ?? ""}`.trim();
      const how = document.createElement("span");
      how.className = "option-how";
      how.textContent = `${chainName(option.chain_id)} · ${t(option.payment_method === "deposit_address" ? "by_transfer" : "by_signature")}`;
      label.append(input, amount, how);
      return label;
    }));
  }
  for (const input of document.querySelectorAll('input[name="option"]')) input.checked = input.value === choice;
}

// A deposit intent's address, QR code and the amount still due, while it can be paid.
function renderDeposit() {
  const p = paying();
  const open = byDeposit() && p.state === "created" && !expired();
  $("deposit").hidden = !open;
  if (!open) return;
  // Two halves that each stay whole: on a narrow screen the address breaks in its middle,
  // never before its last character; selected or copied, it is one string.
  const halves = [p.deposit_address.slice(0, 22), p.deposit_address.slice(22)];
  if ($("deposit-address").textContent !== p.deposit_address) {
    $("deposit-address").replaceChildren(...halves.map((half) => {
      const span = document.createElement("span");
      span.textContent = half;
      return span;
    }));
  }
  $("deposit-hint").textContent = t("deposit_hint", { amount: units(due()), chain: chainName(p.chain_id) });
  $("qr").alt = p.payment_uri ?? "";
  if (p.payment_qr_svg) {
    const source = `data:image/svg+xml;base64,${btoa(p.payment_qr_svg)}`;
    if ($("qr").src !== source) $("qr").src = source;
  }
  const progress = { amount: units(p.amount_confirming), confirmations: p.confirmations, required: p.confirmations_required };
  $("progress").textContent = p.confirmations == null ? ""
    : t(p.confirmations_required === 0 ? "deposit_finalizing" : "deposit_confirming", progress);
}

function renderStatus() {
  const status = $("status");
  status.dataset.state = view ? stateName() : statusOverride ? "unavailable" : "loading";
  if (statusOverride) {
    status.textContent = t(statusOverride[0], statusOverride[1]);
    return;
  }
  if (!view) {
    status.textContent = t("loading");
    return;
  }
  const state = stateName();
  const p = paying();
  const refunded = BigInt(view.amount_refunded ?? "0");
  if (byDeposit() && state === "succeeded" && BigInt(p.amount_received) > BigInt(p.amount)) {
    const overpaid = (BigInt(p.amount_received) - BigInt(p.amount)).toString();
    status.textContent = t("deposit_overpaid", { overpaid: units(overpaid), hash: view.transaction_hash });
  } else if (byDeposit() && state === "created") {
    status.textContent = BigInt(p.amount_received) > 0n
      ? t("deposit_partial", { received: units(p.amount_received), amount: units(p.amount), due: units(due()) })
      : t("deposit_waiting");
  } else if (state === "succeeded" && refunded > 0n) {
    // What was paid stays paid; what came back is said, so "Paid" never hides a refund.
    const received = BigInt(view.amount_received);
    const paid = received > BigInt(view.amount) ? received : BigInt(view.amount);
    const whole = refunded >= paid;
    status.textContent = t(whole ? "refunded_all" : "refunded_part", { refunded: units(view.amount_refunded), hash: view.transaction_hash });
  } else if (state === "succeeded" || (state === "canceled" && view.transaction_hash)) {
    status.textContent = t("succeeded", { hash: view.transaction_hash });
  } else if (state === "processing" && view.pending_reason) {
    status.textContent = t("pending", { reason: reason(view.pending_reason) });
  } else if (state === "failed") {
    status.textContent = t("failed", { reason: reason(view.failure_reason) });
  } else {
    status.textContent = t(state);
  }
}

// The intent's state as the payer reads it: a canceled intent that ran out of time, or a created
// one past its time, is "expired".
function stateName() {
  if (view.state === "canceled" && view.cancellation_reason === "expired" && !view.transaction_hash) return "expired";
  if (view.state === "created" && expired()) return "expired";
  return view.state;
}

function expired() {
  return view && Date.parse(view.expires_at) <= Date.now();
}

function renderCountdown() {
  if (!view) return;
  const left = Math.max(0, Math.floor((Date.parse(view.expires_at) - Date.now()) / 1000));
  const open = view.state === "created" || view.state === "processing";
  const minutes = Math.floor(left / 60);
  const seconds = String(left % 60).padStart(2, "0");
  $("countdown").textContent = open ? `${minutes}:${seconds}` : "—";
}

function chainName(chainId) {
  const known = { 1: "Ethereum", 8453: "Base", 84532: "Base Sepolia", 11155111: "Sepolia", 31337: "Devnet (31337)" };
  return known[chainId] ?? `EVM chain ${chainId}`;
}

// ---- the checkout API ------------------------------------------------------------------------

function api(path, options = {}) {
  const headers = { Authorization: `Bearer ${secret}`, ...(options.headers ?? {}) };
  return fetch(`/v1/checkout/${id}${path}`, { ...options, headers, cache: "no-store", referrerPolicy: "no-referrer" });
}

function show(next) {
  if (!next || (view && next.version < view.version)) return;
  if (!view || next.version !== view.version || next.state !== view.state) statusOverride = null;
  view = next;
  render();
}

async function load() {
  const answer = await api("");
  if (!answer.ok) {
    statusOverride = ["unavailable", {}];
    render();
    return false;
  }
  show(await answer.json());
  return true;
}

// Follows the intent: Server-Sent Events read from a fetch (so the secret stays in a header),
// reconnecting when the stream ends; a poll every few seconds while the stream is down.
async function follow() {
  for (;;) {
    try {
      const answer = await api("/events", { headers: { Accept: "text/event-stream" } });
      if (!answer.ok || !answer.body) throw new Error(`events: ${answer.status}`);
      const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const message = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = message
            .split("\n")
            .filter((line) => line.startsWith("data:"))
            .map((line) => line.slice(5).trimStart())
            .join("\n");
          if (data) show(JSON.parse(data));
        }
      }
    } catch {
      await pause(3000);
      await load().catch(() => {});
    }
    // Final; a canceled intent is followed on, as its payer may still pay it (paid after cancel).
    if (view && ["succeeded", "failed"].includes(view.state)) return;
    await pause(500);
  }
}

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---- the wallet ------------------------------------------------------------------------------

const announced = [];
window.addEventListener("eip6963:announceProvider", (event) => {
  if (event.detail?.provider) announced.push(event.detail);
});

async function findWallet() {
  window.dispatchEvent(new Event("eip6963:requestProvider"));
  await pause(200);
  if (announced.length > 0) return announced[0].provider;
  return window.ethereum ?? null;
}

// Any account may pay an intent that names no payer (an order, or one left open): it is bound to
// the one that confirms.
function rightAccount() {
  return Boolean(account && view && (!view.payer || account.toLowerCase() === view.payer.toLowerCase()));
}

async function copyAddress() {
  try {
    await navigator.clipboard.writeText(paying().deposit_address);
    $("copy").textContent = t("copied");
    setTimeout(() => { $("copy").textContent = t("copy"); }, 2000);
  } catch {
    // No clipboard (an insecure origin): the address is on the page to select.
  }
}

async function connect() {
  $("connect").disabled = true;
  $("connect").textContent = t("connecting");
  try {
    wallet = await findWallet();
    if (!wallet) {
      note = ["no_wallet", {}];
      return;
    }
    const accounts = await wallet.request({ method: "eth_requestAccounts" });
    account = accounts?.[0] ?? null;
    await onChain();
    note = rightAccount()
      ? ["connected", { account: short(account) }]
      : ["wrong_account", { account: short(account), payer: short(view.payer) }];
    wallet.on?.("accountsChanged", (accounts) => {
      account = accounts?.[0] ?? null;
      note = account && !rightAccount() ? ["wrong_account", { account: short(account), payer: short(view.payer) }] : null;
      render();
    });
  } catch (error) {
    account = null;
    note = error?.code === 4001
      ? ["connect_rejected", {}]
      : error?.switching
        ? ["wrong_chain", { chain: chainName(paying().chain_id) }]
        : ["connect_failed", { detail: error?.message ?? String(error) }];
  } finally {
    render();
  }
}

// Puts the wallet on the chain of what is paid (EIP-3326), which it must sign for.
async function onChain() {
  const wanted = `0x${paying().chain_id.toString(16)}`;
  const current = await wallet.request({ method: "eth_chainId" });
  if (String(current).toLowerCase() === wanted) return;
  try {
    await wallet.request({ method: "wallet_switchEthereumChain", params: [{ chainId: wanted }] });
  } catch (error) {
    if (error?.code === 4001) throw error;
    throw Object.assign(new Error(error?.message ?? "switch refused"), { switching: true });
  }
}

async function pay() {
  if (inFlight) return;
  inFlight = true;
  try {
    await payOnce();
  } finally {
    inFlight = false;
    render();
  }
}

async function payOnce() {
  statusOverride = ["paying", {}];
  render();
  let signature;
  let chosen;
  let tokenPermit;
  try {
    await onChain();
    chosen = choosing();
    const answer = await api(`/authorization?${new URLSearchParams(chosen)}`);
    if (!answer.ok) throw Object.assign(new Error("authorization"), { answer: await answer.json() });
    const { typed_data, approval, token_permit } = await answer.json();
    if (token_permit) tokenPermit = await permitToken(token_permit);
    else if (approval) await approve(approval);
    signature = await wallet.request({
      method: "eth_signTypedData_v4",
      params: [account, JSON.stringify(typed_data)],
    });
  } catch (error) {
    if (["invalid_state_transition", "payment_in_progress"].includes(error?.answer?.error)) {
      // Paid from elsewhere meanwhile (another tab): show what is true.
      statusOverride = null;
      await load();
      return;
    }
    statusOverride = error?.code === 4001
      ? ["rejected", {}]
      : ["failed_to_send", { detail: error?.answer?.detail ?? error?.message ?? String(error) }];
    render();
    return;
  }
  statusOverride = ["sending", {}];
  render();
  await confirm(signature, chosen, tokenPermit);
}

// Where the token has EIP-2612, Permit2 is let move the amount by a signed permit instead of an
// approval transaction: the payer signs it, and the payment submits it (no gas for the payer).
async function permitToken(tokenPermit) {
  const amount = units(tokenPermit.typed_data.message.value);
  statusOverride = ["permitting", { token: paying().symbol ?? paying().token, amount }];
  render();
  const signed = await wallet.request({
    method: "eth_signTypedData_v4",
    params: [account, JSON.stringify(tokenPermit.typed_data)],
  });
  statusOverride = ["paying", {}];
  render();
  return signed;
}

// A token without signed transfers is paid through Permit2, which the token must first let move
// the amount: the wallet sends the approvals the server wrote (it encodes them; this page has no
// ABI of its own), and the page waits for each to be mined before asking for the signature.
async function approve(approval) {
  statusOverride = ["approving", { token: paying().symbol ?? paying().token, amount: units(approval.amount) }];
  render();
  for (const step of approval.transactions) {
    const hash = await wallet.request({
      method: "eth_sendTransaction",
      params: [{ from: account, to: step.to, data: step.data }],
    });
    statusOverride = ["approval_mining", {}];
    render();
    const receipt = await mined(hash);
    if (receipt.status !== "0x1") throw new Error(t("approval_failed"));
  }
  statusOverride = ["paying", {}];
  render();
}

// The receipt of transaction `hash`, asked of the wallet until the chain has one; a payer is not
// left waiting for ever on a transaction that is never mined (too low a fee, dropped).
async function mined(hash) {
  const until = Date.now() + 180_000;
  while (Date.now() < until) {
    const receipt = await wallet.request({ method: "eth_getTransactionReceipt", params: [hash] });
    if (receipt) return receipt;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  throw new Error(t("approval_slow"));
}

// What a payment leaves to the payer, as the authorization and the confirm take it: the order's
// option picked here, and the connected account where the intent names no payer.
function choosing() {
  const chosen = {};
  if (unchosenOrder()) chosen.option = choice;
  if (!view.payer) chosen.payer = account;
  return chosen;
}

// POSTs the signature, retried with the same Idempotency-Key (one per signature) until the server
// gives a final answer: a timeout, a lost connection or a 503 says nothing about the outcome.
async function confirm(signature, chosen, tokenPermit) {
  const key = `checkout-${signature.slice(2, 42)}`;
  for (let attempt = 0; attempt < 30; attempt++) {
    let answer = null;
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), 15000);
    try {
      answer = await api("/confirm", {
        method: "POST",
        headers: { "Content-Type": "application/json", "Idempotency-Key": key },
        body: JSON.stringify({ ...chosen, signature, ...(tokenPermit && { token_permit_signature: tokenPermit }) }),
        signal: abort.signal,
      });
    } catch {
      answer = null;
    } finally {
      clearTimeout(timer);
    }
    if (answer && answer.ok) {
      show(await answer.json());
      return;
    }
    const body = answer ? await answer.json().catch(() => ({})) : {};
    const again = !answer || answer.status >= 500 || answer.status === 429 ||
      ["idempotency_key_in_flight", "idempotency_key_lease_lost"].includes(body.error);
    if (!again) {
      await load();
      if (view && view.state === "created") {
        statusOverride = ["failed_to_send", { detail: body.detail ?? answer.status }];
        render();
      }
      return;
    }
    await pause(Math.min(8000, 500 * 2 ** attempt));
  }
  // Whatever happened, the server knows: the state shown is its word, else a plain note.
  await load().catch(() => {});
  if (!view || view.state === "created") {
    statusOverride = ["gave_up", {}];
    render();
  }
}

// ---- start -----------------------------------------------------------------------------------

for (const button of document.querySelectorAll("[data-lang]")) {
  button.addEventListener("click", () => {
    lang = button.dataset.lang;
    localStorage.setItem("checkout.lang", lang);
    render();
  });
}
$("connect").addEventListener("click", connect);
$("pay").addEventListener("click", pay);
$("copy").addEventListener("click", copyAddress);
setInterval(() => {
  renderCountdown();
  if (view && view.state === "created" && expired()) render();
}, 1000);
render();
load().then((ok) => ok && follow());
