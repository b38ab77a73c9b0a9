// The public surface of src/index.js. Every request and answer shape is the generated one
// (src/generated/openapi.d.ts, from openapi.json), so a change of the API changes these types.
import type { components, operations, paths } from "./generated/openapi.js";

export type { components, operations, paths };
type Schemas = components["schemas"];

/** Your key/value strings; openapi.json says only "an object", so this is stated here. */
export type Metadata = Record<string, string>;
export type PaymentIntent = Omit<Schemas["PaymentIntent"], "metadata"> & { metadata: Metadata };
export type Refund = Schemas["Refund"];
/** An event; its `data.object` is the intent or the refund right after the change. */
export type Event = Omit<Schemas["Event"], "data"> & { data: { object: PaymentIntent | Refund } };
export type WebhookEndpoint = Schemas["Endpoint"];
export type DeliveryAttempt = Schemas["DeliveryAttempt"];
export type Balances = Schemas["Balances"];
export type IdempotencyKeyRecord = Schemas["KeyRecord"];
/** The EIP-712 document as `eth_signTypedData_v4` takes it. */
export interface TypedData {
  types: Record<string, { name: string; type: string }[]>;
  primaryType: string;
  domain: Record<string, unknown>;
  message: Record<string, unknown>;
}
export type AuthorizationDocument = Omit<Schemas["AuthorizationDocument"], "typed_data"> & { typed_data: TypedData };
export type Merchant = Schemas["Merchant"];
export type Deleted = Schemas["Deleted"];
export type ErrorBody = Schemas["ErrorBody"];

export type PaymentIntentCreateParams = Omit<Schemas["CreateIntentRequest"], "metadata"> & { metadata?: Metadata | null };
export type PaymentIntentConfirmParams = Schemas["PayRequest"];
export type PaymentIntentListParams = NonNullable<operations["list_payment_intents"]["parameters"]["query"]>;
export type PaymentIntentAuthorizationParams = NonNullable<operations["get_payment_intent_authorization"]["parameters"]["query"]>;
export type RefundCreateParams = Schemas["CreateRefundRequest"];
export type RefundConfirmParams = Schemas["ConfirmRequest"];
export type RefundListParams = NonNullable<operations["list_refunds"]["parameters"]["query"]>;
export type EventListParams = NonNullable<operations["list_events"]["parameters"]["query"]>;
export type WebhookEndpointCreateParams = Schemas["CreateEndpoint"];
export type MerchantUpdateParams = Schemas["UpdateMerchant"];

export interface PaymentsApiOptions {
  apiKey: string;
  /** Where the API is, e.g. `http://localhost:8080`. */
  baseUrl: string;
  /** Retries after the first attempt (default 3). */
  maxRetries?: number;
  /** Per attempt, the answer's body included (default 30000, past the server's own 25 s). */
  timeoutMs?: number;
  /** Backoff without Retry-After: a random wait up to min(max, base * 2^retry) (500 ms, 8000 ms). */
  retryBaseDelayMs?: number;
  retryMaxDelayMs?: number;
  /** The longest a Retry-After is waited (default 20000). */
  retryAfterMaxMs?: number;
  /** Another fetch (a proxy agent, a test's instrumented one). */
  fetch?: typeof fetch;
}

export interface RequestOptions {
  /** Names the logical call; a fresh UUID v4 when absent. Reused on each of its retries. */
  idempotencyKey?: string;
  maxRetries?: number;
  timeoutMs?: number;
}

/** What answered: on every result as the non-enumerable `lastResponse`. */
export interface ResponseInfo {
  status: number;
  requestId?: string;
  /** The key every attempt of a POST carried. */
  idempotencyKey?: string;
  /** Attempts the call took, the first included. */
  attempts: number;
  /** The server answered from its stored response (Idempotent-Replayed: true). */
  replayed: boolean;
  headers: Record<string, string>;
}

export type WithResponse<T> = T & { readonly lastResponse: ResponseInfo };

export interface Page<T> {
  data: T[];
  has_more?: boolean;
}

/** Every item of every page; `limit` is the page size (default 100). */
export declare class ListIterator<T> implements AsyncIterable<T> {
  pages(): AsyncGenerator<Page<T>>;
  [Symbol.asyncIterator](): AsyncGenerator<T>;
  toArray(): Promise<T[]>;
}

export interface ErrorFields {
  status?: number;
  code?: string;
  detail?: string;
  requestId?: string;
  idempotencyKey?: string;
  attempts?: number;
  replayed?: boolean;
  retryable?: boolean;
  outcomeUnknown?: boolean;
  headers?: Record<string, string>;
}

export declare class PaymentsApiError extends Error {
  constructor(message: string, fields?: ErrorFields);
  /** HTTP status; undefined when no answer came. */
  readonly status: number | undefined;
  /** The API's error code (`invalid_state_transition`), or `connection_error`, `timeout`, `bad_gateway`, `gateway_timeout`, `http_<status>`. */
  readonly code: string;
  readonly detail: string;
  readonly requestId: string | undefined;
  /** The key every attempt of the POST carried: look it up when `outcomeUnknown`. */
  readonly idempotencyKey: string | undefined;
  readonly attempts: number;
  /** The answer was the server's stored one (Idempotent-Replayed: true). */
  readonly replayed: boolean;
  /** A kind the library retries: seen only once the retries ran out. */
  readonly retryable: boolean;
  /** The request may have been applied: retry with the same key, or look the key up. */
  readonly outcomeUnknown: boolean;
  readonly headers: Record<string, string> | undefined;
}
export declare class InvalidRequestError extends PaymentsApiError {}
export declare class AuthenticationError extends PaymentsApiError {}
export declare class NotFoundError extends PaymentsApiError {}
export declare class ConflictError extends PaymentsApiError {}
export declare class IdempotencyError extends PaymentsApiError {}
export declare class UnsupportedError extends PaymentsApiError {}
export declare class RateLimitError extends PaymentsApiError {}
export declare class ServerError extends PaymentsApiError {}
export declare class UnavailableError extends PaymentsApiError {}
export declare class ApiConnectionError extends PaymentsApiError {}
export declare class WebhookVerificationError extends Error {}

export declare const ERROR_CODES: Readonly<Record<string, typeof PaymentsApiError>>;

export declare function errorFromResponse(answer: {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
  method?: string;
  idempotencyKey?: string;
  attempts?: number;
  possiblyApplied?: boolean;
}): PaymentsApiError;

export declare function retryDelayMs(
  retryIndex: number,
  retryAfter: string | undefined,
  options: { retryBaseDelayMs: number; retryMaxDelayMs: number; retryAfterMaxMs: number },
): number;

export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

export declare const webhooks: {
  /** The event, once its signature (any of them, after a rotation) and timestamp check out; else throws WebhookVerificationError. */
  verify(rawBody: string | Uint8Array | ArrayBuffer, headers: WebhookHeaders, secret: string): Event;
};

export declare class PaymentsApi {
  constructor(options: PaymentsApiOptions);
  static readonly webhooks: typeof webhooks;

  readonly paymentIntents: {
    create(params: PaymentIntentCreateParams, options?: RequestOptions): Promise<WithResponse<PaymentIntent>>;
    retrieve(id: string, options?: RequestOptions): Promise<WithResponse<PaymentIntent>>;
    list(params?: PaymentIntentListParams): ListIterator<PaymentIntent>;
    cancel(id: string, options?: RequestOptions): Promise<WithResponse<PaymentIntent>>;
    authorization(id: string, params?: PaymentIntentAuthorizationParams, options?: RequestOptions): Promise<WithResponse<AuthorizationDocument>>;
    confirm(id: string, params: PaymentIntentConfirmParams, options?: RequestOptions): Promise<WithResponse<PaymentIntent>>;
  };
  readonly refunds: {
    create(intentId: string, params?: RefundCreateParams, options?: RequestOptions): Promise<WithResponse<Refund>>;
    retrieve(id: string, options?: RequestOptions): Promise<WithResponse<Refund>>;
    list(params?: RefundListParams): ListIterator<Refund>;
    authorization(id: string, options?: RequestOptions): Promise<WithResponse<AuthorizationDocument>>;
    confirm(id: string, params: RefundConfirmParams, options?: RequestOptions): Promise<WithResponse<Refund>>;
  };
  readonly events: {
    list(params?: EventListParams): ListIterator<Event>;
    retrieve(id: string, options?: RequestOptions): Promise<WithResponse<Event>>;
    deliveries(id: string, options?: RequestOptions): Promise<WithResponse<Schemas["DeliveryList"]>>;
  };
  readonly webhookEndpoints: {
    create(params: WebhookEndpointCreateParams, options?: RequestOptions): Promise<WithResponse<WebhookEndpoint>>;
    retrieve(id: string, options?: RequestOptions): Promise<WithResponse<WebhookEndpoint>>;
    list(): ListIterator<WebhookEndpoint>;
    delete(id: string, options?: RequestOptions): Promise<WithResponse<Deleted>>;
    rotateSecret(id: string, options?: RequestOptions): Promise<WithResponse<WebhookEndpoint>>;
  };
  readonly balances: {
    list(options?: RequestOptions): Promise<WithResponse<Balances>>;
  };
  readonly idempotencyKeys: {
    retrieve(key: string, options?: RequestOptions): Promise<WithResponse<IdempotencyKeyRecord>>;
  };
  readonly merchant: {
    retrieve(options?: RequestOptions): Promise<WithResponse<Merchant>>;
    update(params: MerchantUpdateParams, options?: RequestOptions): Promise<WithResponse<Merchant>>;
  };

  /** Any call through the same keys, retries and errors. */
  request<T = unknown>(
    method: "GET" | "POST" | "DELETE",
    route: string,
    options?: RequestOptions & { query?: Record<string, string | number | undefined>; body?: unknown },
  ): Promise<WithResponse<T>>;
}

export default PaymentsApi;
