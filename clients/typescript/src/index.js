// payments-api-client: the hand-written core. The shapes are generated from openapi.json
// (src/generated/openapi.d.ts); this file is the transport around them: one Idempotency-Key per
// logical call reused by all its retries, which answers are retried, typed errors, pagination and
// webhook verification (Standard Webhooks' own library).
import { Webhook } from "standardwebhooks";

const DEFAULTS = {
  maxRetries: 3,
  // Longer than the server's own REQUEST_TIMEOUT_SECONDS (25), so the server answers first.
  timeoutMs: 30_000,
  retryBaseDelayMs: 500,
  retryMaxDelayMs: 8_000,
  // A Retry-After longer than this is waited this long: a client never hangs on a bad header.
  retryAfterMaxMs: 20_000,
};

/// Every error the API or the way to it gives. `retryable`: the kind the library retries (seen
/// here only once the retries ran out). `outcomeUnknown`: the request may have been applied; look
/// `idempotencyKey` up (`api.idempotencyKeys.retrieve`) or retry with the same key to learn it.
export class PaymentsApiError extends Error {
  constructor(message, fields = {}) {
    super(message);
    this.name = new.target.name;
    this.status = fields.status;
    this.code = fields.code;
    this.detail = fields.detail;
    this.requestId = fields.requestId;
    this.idempotencyKey = fields.idempotencyKey;
    this.attempts = fields.attempts ?? 1;
    this.replayed = fields.replayed ?? false;
    this.retryable = fields.retryable ?? false;
    this.outcomeUnknown = fields.outcomeUnknown ?? false;
    this.headers = fields.headers;
  }
}
/** 400, 405, 408, 413: the request must change. */
export class InvalidRequestError extends PaymentsApiError {}
/** 401: the API key is missing, unknown, revoked or expired. */
export class AuthenticationError extends PaymentsApiError {}
/** 404: absent, or another merchant's. */
export class NotFoundError extends PaymentsApiError {}
/** 409: the resource's state forbids it (a cancel of a paid intent, a refund past the payment). */
export class ConflictError extends PaymentsApiError {}
/** The idempotency layer's own answers: a malformed, missing, reused, in-flight or lost key. */
export class IdempotencyError extends PaymentsApiError {}
/** 422: this server cannot do it for that chain or token. */
export class UnsupportedError extends PaymentsApiError {}
/** 429: past the merchant's limits; nothing was done. */
export class RateLimitError extends PaymentsApiError {}
/** 500: the server failed; on a POST its stored answer, so the outcome is indeterminate. */
export class ServerError extends PaymentsApiError {}
/** 502, 503, 504: the server or a proxy in front of it could not answer now. */
export class UnavailableError extends PaymentsApiError {}
/** No answer: the connection failed or the attempt timed out (a POST may have arrived). */
export class ApiConnectionError extends PaymentsApiError {}
/** A webhook delivery that is not signed by the secret, or signed too long ago. */
export class WebhookVerificationError extends Error {
  constructor(message) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

/// Every error code of docs/api.md, and the class it is thrown as.
export const ERROR_CODES = Object.freeze({
  invalid_request: InvalidRequestError,
  method_not_allowed: InvalidRequestError,
  request_timeout: InvalidRequestError,
  payload_too_large: InvalidRequestError,
  unauthorized: AuthenticationError,
  not_found: NotFoundError,
  invalid_state_transition: ConflictError,
  refund_exceeds_payment: ConflictError,
  payment_in_progress: ConflictError,
  payment_identifier_reused: ConflictError,
  idempotency_key_invalid: IdempotencyError,
  idempotency_key_missing: IdempotencyError,
  idempotency_key_in_flight: IdempotencyError,
  idempotency_key_lease_lost: IdempotencyError,
  idempotency_key_reused: IdempotencyError,
  token_not_supported: UnsupportedError,
  chain_not_settled: UnsupportedError,
  permit2_allowance_required: UnsupportedError,
  rate_limited: RateLimitError,
  internal_error: ServerError,
  unavailable: UnavailableError,
});

const BY_STATUS = { 400: InvalidRequestError, 401: AuthenticationError, 404: NotFoundError, 405: InvalidRequestError,
  408: InvalidRequestError, 409: ConflictError, 413: InvalidRequestError, 422: UnsupportedError, 429: RateLimitError,
  500: ServerError, 502: UnavailableError, 503: UnavailableError, 504: UnavailableError };

// Answers a later attempt with the same key can change: the first attempt still running or taken
// over (409), the merchant's limits (429), a server or proxy that could not answer (502-504).
function retryableAnswer(status, code) {
  if (status === 409) return code === "idempotency_key_in_flight" || code === "idempotency_key_lease_lost";
  return status === 429 || status === 502 || status === 503 || status === 504;
}

function errorClass(status, code) {
  return ERROR_CODES[code] ?? BY_STATUS[status] ?? (status >= 500 ? ServerError : PaymentsApiError);
}

/// The error for an answer that is not 2xx; `attempts` and `possiblyApplied` describe the whole call.
export function errorFromResponse({ status, body, headers = {}, method = "GET", idempotencyKey, attempts = 1, possiblyApplied = false }) {
  const parsed = body && typeof body === "object" && typeof body.error === "string" ? body : null;
  const code = parsed?.error ?? ({ 502: "bad_gateway", 504: "gateway_timeout" }[status] ?? `http_${status}`);
  const detail = parsed?.detail ?? (typeof body === "string" ? body.slice(0, 200) : "");
  const replayed = headers["idempotent-replayed"] === "true";
  const retryable = retryableAnswer(status, code);
  const keyed = method === "POST" && idempotencyKey !== undefined;
  // A 500 on a POST is the answer the server stored for the key: retrying replays it, and whether
  // the work happened is not known from it.
  // A retryable answer other than 429 may follow an attempt that did the work (a lost answer, a
  // first attempt still running), and so may any answer after an attempt that got none.
  const outcomeUnknown = keyed && (status >= 500 && !retryable ? true : retryable && (possiblyApplied || status !== 429));
  let message = `${status} ${code}: ${detail}`;
  if (attempts > 1) message += ` (after ${attempts} attempts)`;
  if (outcomeUnknown && status === 500) {
    message += `. ${replayed ? "Replayed: this is the answer the server stored for" : "The server stored this answer for"}` +
      ` Idempotency-Key "${idempotencyKey}"; the outcome is indeterminate: look the key up` +
      " (idempotencyKeys.retrieve) before acting on it";
  } else if (outcomeUnknown) {
    message += `. The request may have been applied: retry with Idempotency-Key "${idempotencyKey}" to learn its outcome`;
  } else if (idempotencyKey !== undefined && method === "POST") {
    message += ` [Idempotency-Key "${idempotencyKey}"]`;
  }
  const Class = errorClass(status, code);
  return new Class(message, {
    status, code, detail, requestId: headers["x-request-id"], idempotencyKey: keyed ? idempotencyKey : undefined,
    attempts, replayed, retryable, outcomeUnknown, headers,
  });
}

function connectionError({ cause, timedOut, timeoutMs, method, idempotencyKey, attempts, requestId }) {
  const keyed = method === "POST" && idempotencyKey !== undefined;
  const code = timedOut ? "timeout" : "connection_error";
  let detail = timedOut ? `no answer within ${timeoutMs} ms` : `the connection failed: ${cause?.cause?.code ?? cause?.message ?? cause}`;
  if (attempts > 1) detail += ` (after ${attempts} attempts)`;
  let message = detail;
  if (keyed) message += `. The request may have been applied: retry with Idempotency-Key "${idempotencyKey}" to learn its outcome`;
  const error = new ApiConnectionError(message, {
    code, detail, requestId, idempotencyKey: keyed ? idempotencyKey : undefined, attempts,
    retryable: true, outcomeUnknown: keyed,
  });
  error.cause = cause;
  return error;
}

/// How long to wait before the next attempt: the server's Retry-After (capped) when it sent one,
/// else exponential backoff with full jitter.
export function retryDelayMs(retryIndex, retryAfter, options) {
  if (retryAfter != null && retryAfter !== "") {
    let ms = Number(retryAfter) * 1000;
    if (!Number.isFinite(ms)) ms = Date.parse(retryAfter) - Date.now();
    if (Number.isFinite(ms)) return Math.min(Math.max(ms, 0), options.retryAfterMaxMs);
  }
  const ceiling = Math.min(options.retryMaxDelayMs, options.retryBaseDelayMs * 2 ** retryIndex);
  return Math.random() * ceiling;
}

const NODE_CRYPTO = "node:crypto";
async function uuid4() {
  const webCrypto = globalThis.crypto;
  if (webCrypto?.randomUUID) return webCrypto.randomUUID();
  // A page outside a secure context (plain http on a host other than localhost) has no
  // randomUUID, only getRandomValues: the same version 4 UUID from 16 random bytes.
  if (webCrypto?.getRandomValues) {
    const bytes = webCrypto.getRandomValues(new Uint8Array(16));
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }
  // Node 18 has Web Crypto only as a module, not as a global. The name is not a literal, so
  // bundlers for the browser (which never gets here) leave the import alone.
  const { randomUUID } = await import(/* webpackIgnore: true */ /* @vite-ignore */ NODE_CRYPTO);
  return randomUUID();
}

function headersObject(headers) {
  const out = {};
  headers.forEach((value, name) => (out[name.toLowerCase()] = value));
  return out;
}

function withResponse(value, info) {
  if (value && typeof value === "object") {
    Object.defineProperty(value, "lastResponse", { value: info, enumerable: false, configurable: true });
  }
  return value;
}

function parseBody(text) {
  if (text === "") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/// Every item of every page, newest first: `for await (const x of api.paymentIntents.list())`.
/// `limit` is the page size; the next page starts after the last id of the one before.
export class ListIterator {
  constructor(fetchPage, params = {}) {
    this.fetchPage = fetchPage;
    this.params = params;
  }
  async *pages() {
    let after = this.params.starting_after;
    for (;;) {
      const page = await this.fetchPage({ ...this.params, starting_after: after });
      yield page;
      if (!page.has_more || page.data.length === 0) return;
      after = page.data[page.data.length - 1].id;
    }
  }
  async *[Symbol.asyncIterator]() {
    for await (const page of this.pages()) yield* page.data;
  }
  async toArray() {
    const all = [];
    for await (const item of this) all.push(item);
    return all;
  }
}

const path = (strings, ...values) => strings.reduce((out, s, i) => out + s + (i < values.length ? encodeURIComponent(values[i]) : ""), "");

function verify(rawBody, headers, secret) {
  let plain = {};
  if (headers && typeof headers.forEach === "function" && typeof headers.get === "function") plain = headersObject(headers);
  else for (const [name, value] of Object.entries(headers ?? {})) plain[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : value;
  const payload = rawBody instanceof ArrayBuffer ? new Uint8Array(rawBody) : rawBody;
  try {
    return new Webhook(secret).verify(payload, plain);
  } catch (e) {
    throw new WebhookVerificationError(e.message);
  }
}

/// Webhook verification: the event, or WebhookVerificationError.
export const webhooks = Object.freeze({ verify });

export class PaymentsApi {
  static webhooks = webhooks;

  constructor({ apiKey, baseUrl, fetch: fetchImpl, ...options } = {}) {
    if (!apiKey) throw new TypeError("PaymentsApi: apiKey is required");
    if (!baseUrl) throw new TypeError("PaymentsApi: baseUrl is required (e.g. http://localhost:8080)");
    this.apiKey = apiKey;
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.options = { ...DEFAULTS };
    for (const [name, value] of Object.entries(options)) if (value !== undefined) this.options[name] = value;
    this.fetch = fetchImpl ?? ((...args) => globalThis.fetch(...args));

    const list = (route) => (params = {}) =>
      new ListIterator((query) => this.request("GET", route, { query: { limit: 100, ...query } }), params);
    this.paymentIntents = {
      create: (params, opts = {}) => this.request("POST", "/v1/payment_intents", { ...opts, body: params }),
      retrieve: (id, opts = {}) => this.request("GET", path`/v1/payment_intents/${id}`, opts),
      list: list("/v1/payment_intents"),
      cancel: (id, opts = {}) => this.request("POST", path`/v1/payment_intents/${id}/cancel`, { ...opts, body: {} }),
      authorization: (id, params = {}, opts = {}) => this.request("GET", path`/v1/payment_intents/${id}/authorization`, { ...opts, query: params }),
      confirm: (id, params, opts = {}) => this.request("POST", path`/v1/payment_intents/${id}/confirm`, { ...opts, body: params }),
    };
    this.refunds = {
      create: (intentId, params = {}, opts = {}) => this.request("POST", path`/v1/payment_intents/${intentId}/refunds`, { ...opts, body: params }),
      retrieve: (id, opts = {}) => this.request("GET", path`/v1/refunds/${id}`, opts),
      list: list("/v1/refunds"),
      authorization: (id, opts = {}) => this.request("GET", path`/v1/refunds/${id}/authorization`, opts),
      confirm: (id, params, opts = {}) => this.request("POST", path`/v1/refunds/${id}/confirm`, { ...opts, body: params }),
    };
    this.events = {
      list: list("/v1/events"),
      retrieve: (id, opts = {}) => this.request("GET", path`/v1/events/${id}`, opts),
      deliveries: (id, opts = {}) => this.request("GET", path`/v1/events/${id}/deliveries`, opts),
    };
    this.webhookEndpoints = {
      create: (params, opts = {}) => this.request("POST", "/v1/webhook_endpoints", { ...opts, body: params }),
      retrieve: (id, opts = {}) => this.request("GET", path`/v1/webhook_endpoints/${id}`, opts),
      list: list("/v1/webhook_endpoints"),
      delete: (id, opts = {}) => this.request("DELETE", path`/v1/webhook_endpoints/${id}`, opts),
      rotateSecret: (id, opts = {}) => this.request("POST", path`/v1/webhook_endpoints/${id}/rotate_secret`, { ...opts, body: {} }),
    };
    this.balances = { list: (opts = {}) => this.request("GET", "/v1/balances", opts) };
    this.idempotencyKeys = { retrieve: (key, opts = {}) => this.request("GET", path`/v1/idempotency_keys/${key}`, opts) };
    this.merchant = {
      retrieve: (opts = {}) => this.request("GET", "/v1/merchant", opts),
      update: (params, opts = {}) => this.request("POST", "/v1/merchant", { ...opts, body: params }),
    };
  }

  /// Any call, with the same keys, retries and errors: `api.request("GET", "/v1/balances")`.
  async request(method, route, { query, body, idempotencyKey, maxRetries, timeoutMs } = {}) {
    const options = this.options;
    const retries = maxRetries ?? options.maxRetries;
    const timeout = timeoutMs ?? options.timeoutMs;
    // One key per logical call, the same on every attempt: the server executes it once.
    const key = method === "POST" ? (idempotencyKey ?? (await uuid4())) : undefined;
    // Serialized once: the server fingerprints the raw bytes, so every retry sends these.
    const payload = body === undefined ? undefined : JSON.stringify(body);
    let url = this.baseUrl + route;
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(query ?? {})) if (value != null) search.append(name, String(value));
    if ([...search].length) url += `?${search}`;

    let possiblyApplied = false;
    for (let attempt = 1; ; attempt++) {
      const requestId = await uuid4();
      // Built outside the try below: a header fetch refuses (a key with a newline) is the
      // caller's mistake, not a connection error to retry.
      const headers = new Headers({ authorization: `Bearer ${this.apiKey}`, accept: "application/json", "x-request-id": requestId });
      if (payload !== undefined) headers.set("content-type", "application/json");
      if (key !== undefined) headers.set("idempotency-key", key);
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(), timeout);
      let error;
      try {
        const response = await this.fetch(url, { method, headers, body: payload, signal: controller.signal });
        const text = await response.text();
        clearTimeout(timer);
        const answerHeaders = headersObject(response.headers);
        const parsed = parseBody(text);
        if (response.ok) {
          return withResponse(parsed, {
            status: response.status, requestId: answerHeaders["x-request-id"], idempotencyKey: key, attempts: attempt,
            replayed: answerHeaders["idempotent-replayed"] === "true", headers: answerHeaders,
          });
        }
        error = errorFromResponse({ status: response.status, body: parsed, headers: answerHeaders, method, idempotencyKey: key, attempts: attempt, possiblyApplied });
        if (!error.retryable || attempt > retries) throw error;
        if (response.status !== 429) possiblyApplied = true;
        await sleep(retryDelayMs(attempt - 1, answerHeaders["retry-after"], options));
      } catch (e) {
        clearTimeout(timer);
        if (e === error) throw e;
        if (e instanceof PaymentsApiError) throw e;
        // No answer: the request may have arrived and been applied (a POST is safe to send again
        // only because its key is the same).
        possiblyApplied = true;
        const failure = connectionError({ cause: e, timedOut: controller.signal.aborted, timeoutMs: timeout, method, idempotencyKey: key, attempts: attempt, requestId });
        if (attempt > retries) throw failure;
        await sleep(retryDelayMs(attempt - 1, undefined, options));
      }
    }
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export default PaymentsApi;
