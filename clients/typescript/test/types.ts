// Compiled by `tsc` (npm run typecheck), never run: the declarations accept what the API takes
// and refuse what it would reject, so a mistake shows in the editor, not as a 400.
import { PaymentsApi, PaymentsApiError, type PaymentIntent, type Event } from "../src/index.js";

const api = new PaymentsApi({ apiKey: "merchant-demo", baseUrl: "http://localhost:8080", maxRetries: 3, timeoutMs: 5000 });

export async function usage(): Promise<void> {
  const intent = await api.paymentIntents.create(
    { chain: "evm:31337", token: "0x5FbDB2315678afecb367f032d93F642f64180aa3", merchant: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", amount: "1", metadata: { order: "1001" } },
    { idempotencyKey: "order-1" },
  );
  const state: "created" | "canceled" | "processing" | "succeeded" | "failed" = intent.state;
  const attempts: number = intent.lastResponse.attempts;
  const order: string | undefined = intent.metadata.order;
  for await (const listed of api.paymentIntents.list({ state: "created", limit: 50 })) {
    const id: string = listed.id;
    void id;
  }
  const { typed_data } = await api.paymentIntents.authorization(intent.id);
  const primary: string = typed_data.primaryType;
  await api.paymentIntents.confirm(intent.id, { signature: "0x00" });
  const record = await api.idempotencyKeys.retrieve("order-1");
  const resource: string | null | undefined = record.resource_id;
  const event: Event = PaymentsApi.webhooks.verify("{}", { "webhook-id": "evt_1" }, "whsec_AAAA");
  const object: PaymentIntent | { payment_intent: string } = event.data.object;
  try {
    await api.paymentIntents.cancel(intent.id);
  } catch (e) {
    if (e instanceof PaymentsApiError && e.outcomeUnknown) await api.idempotencyKeys.retrieve(e.idempotencyKey!);
  }
  void [state, attempts, order, primary, resource, object];

  // @ts-expect-error amounts are decimal strings, never numbers
  await api.paymentIntents.create({ chain: "evm:31337", merchant: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", amount: 1 });
  // @ts-expect-error unknown fields are rejected by the server, and so here
  await api.paymentIntents.create({ amount: "1", merchant: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", expires_in_secs: 60 });
  // @ts-expect-error a confirm needs the signature
  await api.paymentIntents.confirm(intent.id, {});
}
