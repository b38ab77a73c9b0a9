"""The client against the real server (and, where the network must fail, the fault proxy): keys and
retries, every error the server answers, pagination, webhooks from a real delivery."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

import payments_api
from payments_api import (
    ApiConnectionError,
    AuthenticationError,
    ConflictError,
    IdempotencyError,
    InvalidRequestError,
    NotFoundError,
    PaymentsApi,
    PaymentsApiError,
    RateLimitError,
    ServerError,
    UnsupportedError,
    WebhookVerificationError,
)

from .conftest import BOOTSTRAP, PAYER, STRANGER, UUID_V4, intent_params, until
from .fault_proxy import FaultProxy


def client(stack, merchant: str, **options) -> PaymentsApi:
    return PaymentsApi(api_key=f"merchant-{merchant}", base_url=stack.base, **options)


def scripted(fates: list):
    """A proxy plan: the listed fates in order, then every request passed."""
    return lambda request, index: fates.pop(0) if fates else "pass"


def test_a_calls_key_is_the_callers_or_a_fresh_uuid4_the_same_on_every_attempt_and_gets_carry_none(stack):
    fates: list = []
    with FaultProxy(stack.base, scripted(fates)) as proxy:
        retrying = PaymentsApi(api_key="merchant-retries", base_url=proxy.url, retry_base_delay=0.01, retry_max_delay=0.05)
        fates += ["reset", "bad_gateway"]
        intent = retrying.payment_intents.create(idempotency_key="order-1001", **intent_params(1))
        info = intent.last_response
        assert (info.attempts, info.idempotency_key, info.replayed) == (3, "order-1001", True)
        assert [r["headers"]["idempotency-key"] for r in proxy.seen] == ["order-1001"] * 3
        assert len({r["body"] for r in proxy.seen}) == 1, "the same bytes each time, or the server sees another request"

        proxy.seen.clear()
        fates += ["reset"]
        first = retrying.payment_intents.create(**intent_params(2))
        second = retrying.payment_intents.create(**intent_params(3))
        sent = [r["headers"]["idempotency-key"] for r in proxy.seen]
        assert len(sent) == 3 and sent[0] == sent[1] != sent[2]
        assert re.match(UUID_V4, first.last_response.idempotency_key)
        assert second.last_response.idempotency_key == sent[2]

        proxy.seen.clear()
        fates += ["bad_gateway", "reset"]
        again = retrying.payment_intents.retrieve(intent.id)
        assert (again.id, again.last_response.attempts, again.last_response.idempotency_key) == (intent.id, 3, None)
        assert all(r["method"] == "GET" and "idempotency-key" not in r["headers"] for r in proxy.seen)


def test_no_answer_after_the_last_retry_names_the_key_and_the_key_tells_what_happened(stack):
    with FaultProxy(stack.base, lambda request, index: "reset") as proxy:
        retrying = PaymentsApi(api_key="merchant-retries", base_url=proxy.url, max_retries=2, retry_base_delay=0.01)
        with pytest.raises(ApiConnectionError) as caught:
            retrying.payment_intents.create(**intent_params(4))
    error = caught.value
    assert (error.code, error.attempts, error.retryable, error.outcome_unknown) == ("connection_error", 3, True, True)
    assert re.match(UUID_V4, error.idempotency_key) and error.idempotency_key in str(error)
    # The server did it (every answer was lost after its commit): the key says so.
    record = client(stack, "retries").idempotency_keys.retrieve(error.idempotency_key)
    assert record.response_status == 201
    assert client(stack, "retries").payment_intents.retrieve(record.resource_id).metadata["call"] == "4"


def test_a_replayed_500_is_not_retried_indeterminate_and_naming_the_key(stack):
    # The server stores a 500 only when it fails, which it cannot be made to here: the proxy
    # answers as the server replays one (same body and headers).
    stored = {
        "status": 500,
        "headers": {"content-type": "application/json", "idempotent-replayed": "true", "x-request-id": "req-500"},
        "body": json.dumps({"error": "internal_error", "detail": "internal error"}),
    }
    with FaultProxy(stack.base, lambda request, index: stored if request["method"] == "POST" else "pass") as proxy:
        retrying = PaymentsApi(api_key="merchant-retries", base_url=proxy.url, retry_base_delay=0.01)
        with pytest.raises(ServerError) as caught:
            retrying.payment_intents.create(idempotency_key="order-500", **intent_params(5))
        assert len(proxy.seen) == 1, "never sent again"
    error = caught.value
    assert (error.attempts, error.replayed, error.outcome_unknown, error.retryable) == (1, True, True, False)
    assert (error.idempotency_key, error.request_id) == ("order-500", "req-500")
    assert "indeterminate" in str(error) and "order-500" in str(error)


def test_a_server_limited_to_a_request_a_second_requiring_keys_settling_nothing(stack):
    base = stack.start_api(
        BOOTSTRAP_API_KEYS=BOOTSTRAP,
        MERCHANT_RATE_LIMIT="1",
        MERCHANT_REFUSAL_PAUSE_MS="0",
        IDEMPOTENCY_KEY_REQUIRED="true",
        # Settlement off: intents may name any chain, and paying one is chain_not_settled.
        CHAINS="",
    )
    once = PaymentsApi(api_key="merchant-demo", base_url=base, max_retries=0)
    refused = None
    # The limit is per second: a refusal comes within two calls of the same window.
    for _ in range(5):
        try:
            once.balances.list()
        except RateLimitError as exc:
            refused = exc
            break
    assert refused is not None, "never refused"
    assert (refused.code, refused.status, refused.attempts, refused.retryable, refused.outcome_unknown) == (
        "rate_limited", 429, 1, True, False)
    wait = float(refused.headers["retry-after"])
    assert wait >= 1

    # Capped far below the server's second: the refused attempts follow each other at once.
    impatient = PaymentsApi(api_key="merchant-other", base_url=base, max_retries=3, retry_after_max=0.02)
    outcome = None
    for _ in range(3):
        try:
            impatient.balances.list()
        except RateLimitError:
            pass
        started = time.monotonic()
        try:
            attempts = impatient.balances.list().last_response.attempts
        except RateLimitError as exc:
            attempts = exc.attempts
        outcome = (attempts, time.monotonic() - started)
        if attempts > 1:
            break
    assert outcome[0] > 1, f"refused first: {outcome}"
    assert outcome[1] < 0.9, f"the capped waits took {outcome[1]:.2f} s, not Retry-After's {wait} s"

    # Waiting as told gets through: three calls in the same second take their turns.
    async def three():
        async with payments_api.AsyncPaymentsApi(api_key="merchant-retries", base_url=base) as patient:
            return await asyncio.gather(*(patient.payment_intents.create(**intent_params(10 + i)) for i in range(3)))

    begun = time.monotonic()
    attempts = sorted(r.last_response.attempts for r in asyncio.run(three()))
    assert attempts[0] == 1 and attempts[2] >= 2, attempts
    assert time.monotonic() - begun >= wait - 0.2, "the refused calls waited Retry-After"

    # The same server requires a key: only a call without the library gets that error.
    answer = httpx.post(f"{base}/v1/payment_intents", headers={"authorization": "Bearer merchant-plain"}, json=intent_params(0))
    missing = payments_api.error_from_response(answer.status_code, answer.json(), answer.headers, method="POST")
    assert isinstance(missing, IdempotencyError) and missing.code == "idempotency_key_missing"

    unsettled = PaymentsApi(api_key="merchant-errors", base_url=base)
    elsewhere = unsettled.payment_intents.create(**intent_params(0, chain="evm:1"))
    with pytest.raises(UnsupportedError) as caught:
        unsettled.payment_intents.authorization(elsewhere.id)
    assert (caught.value.code, caught.value.status, caught.value.retryable) == ("chain_not_settled", 422, False)


def test_every_error_the_server_answers_here_is_typed_and_the_refusals_are_not_retried(stack):
    errors = client(stack, "errors", retry_base_delay=0.01)

    def refused(cls, status, code, call, *args, **kwargs):
        with pytest.raises(PaymentsApiError) as caught:
            call(*args, **kwargs)
        error = caught.value
        assert isinstance(error, cls), f"{code}: got {error!r}"
        assert (error.status, error.code, error.attempts, error.retryable, error.outcome_unknown) == (status, code, 1, False, False)
        assert isinstance(error.detail, str) and error.request_id, "the request id, for the server's log"
        return error

    refused(InvalidRequestError, 400, "invalid_request", errors.payment_intents.create, **intent_params(0, amount="01"))
    refused(AuthenticationError, 401, "unauthorized", client(stack, "nobody").payment_intents.retrieve, "pi_000000000000000000000000")
    refused(NotFoundError, 404, "not_found", errors.payment_intents.retrieve, "pi_000000000000000000000000")
    refused(InvalidRequestError, 405, "method_not_allowed", errors.request, "DELETE", "/v1/payment_intents")
    big = intent_params(0, metadata={f"k{i}": "x" * 500 for i in range(50)}, description="y" * 70000)
    # A client of its own: the server refuses from Content-Length and closes the connection, which a
    # shared pool would find closed on its next call (and retry, as it should).
    refused(InvalidRequestError, 413, "payload_too_large", client(stack, "errors").payment_intents.create, **big)
    bad_key = refused(IdempotencyError, 400, "idempotency_key_invalid", errors.payment_intents.create, idempotency_key="two words", **intent_params(0))
    assert bad_key.idempotency_key == "two words"

    intent = errors.payment_intents.create(idempotency_key="order-7", **intent_params(0))
    reused = refused(IdempotencyError, 422, "idempotency_key_reused", errors.payment_intents.create, idempotency_key="order-7", **intent_params(0, amount="999"))
    assert reused.idempotency_key == "order-7"
    assert errors.payment_intents.cancel(intent.id).state == "canceled"
    refused(ConflictError, 409, "invalid_state_transition", errors.payment_intents.cancel, intent.id)
    refused(ConflictError, 409, "invalid_state_transition", errors.refunds.create, intent.id)
    not_a_token = errors.payment_intents.create(**intent_params(0, token=STRANGER))
    refused(UnsupportedError, 422, "token_not_supported", errors.payment_intents.authorization, not_a_token.id)

    # A paid intent refunded in full: a second refund exceeds the payment.
    paid = errors.payment_intents.create(**intent_params(0))
    document = errors.payment_intents.authorization(paid.id)
    signed = httpx.post(stack.chain, json={"jsonrpc": "2.0", "id": 1, "method": "eth_signTypedData_v4", "params": [PAYER, json.dumps(document.typed_data)]})
    assert errors.payment_intents.confirm(paid.id, signature=signed.json()["result"]).state == "processing"
    until("the payment to settle", lambda: errors.payment_intents.retrieve(paid.id).state == "succeeded")
    refund = errors.refunds.create(paid.id, reason="requested_by_customer")
    assert refund.amount == paid.amount
    assert errors.refunds.retrieve(refund.id).id == refund.id
    assert [r.id for r in errors.refunds.list(payment_intent=paid.id)] == [refund.id]
    refused(ConflictError, 409, "refund_exceeds_payment", errors.refunds.create, paid.id)


def test_list_walks_every_page_250_intents_newest_first_each_once(stack):
    async def create_all():
        async with payments_api.AsyncPaymentsApi(api_key="merchant-pages", base_url=stack.base) as pages:
            made = await asyncio.gather(*(pages.payment_intents.create(**intent_params(i)) for i in range(250)))
            async_listed = [intent.id async for intent in pages.payment_intents.list(limit=100)]
            return made, async_listed

    created, async_listed = asyncio.run(create_all())
    pages = client(stack, "pages")
    assert [len(page) for page in pages.payment_intents.list(limit=100).pages()] == [100, 100, 50]
    listed = list(pages.payment_intents.list())
    assert len(listed) == 250
    assert {i.id for i in listed} == {i.id for i in created}
    assert async_listed == [i.id for i in listed], "the async pager walks the same pages"
    assert all(a.created_at >= b.created_at for a, b in zip(listed, listed[1:])), "newest first"
    # Filters go with every page; small pages too.
    canceled = listed[:3]
    for intent in canceled:
        pages.payment_intents.cancel(intent.id)
    assert {i.id for i in pages.payment_intents.list(state="canceled", limit=1)} == {i.id for i in canceled}
    assert len(list(pages.events.list(type="payment_intent.canceled", limit=2))) == 3


class Receiver:
    """An HTTP receiver that keeps every delivery as it arrived: raw body and headers."""

    def __init__(self) -> None:
        deliveries = self.deliveries = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["content-length"]))
                deliveries.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):  # quiet: the test asserts on what arrived
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def delivery_of(self, intent_id: str) -> dict:
        return until(f"a delivery of {intent_id}", lambda: next((d for d in self.deliveries if intent_id.encode() in d["body"]), None))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_webhooks_a_real_delivery_verifies_tampered_old_and_strangers_do_not_a_rotated_secret_works(stack):
    hooks = client(stack, "hooks")
    receiver = Receiver()
    try:
        endpoint = hooks.webhook_endpoints.create(url=receiver.url, event_types=["payment_intent.created"])
        assert endpoint.secret.startswith("whsec_")
        assert [e.id for e in hooks.webhook_endpoints.list()] == [endpoint.id]
        intent = hooks.payment_intents.create(**intent_params(1))
        delivery = receiver.delivery_of(intent.id)

        event = payments_api.webhooks.verify(delivery["body"], delivery["headers"], endpoint.secret)
        assert event.type == "payment_intent.created"
        assert event.id == delivery["headers"]["webhook-id"]
        assert event.data.object["id"] == intent.id
        assert event.data.object == hooks.events.retrieve(event.id).data.object
        assert payments_api.webhooks.verify(delivery["body"].decode(), httpx.Headers(delivery["headers"]), endpoint.secret).id == event.id

        def rejected(body, headers, secret, reason):
            with pytest.raises(WebhookVerificationError, match=reason):
                payments_api.webhooks.verify(body, headers, secret)

        rejected(delivery["body"].replace(intent.amount.encode(), b"999999999"), delivery["headers"], endpoint.secret, "signature")
        old = {**delivery["headers"], "webhook-timestamp": str(int(time.time()) - 600)}
        rejected(delivery["body"], old, endpoint.secret, "too old")
        stranger = "whsec_" + base64.b64encode(uuid.uuid4().bytes * 2).decode()
        rejected(delivery["body"], delivery["headers"], stranger, "signature")

        rotated = hooks.webhook_endpoints.rotate_secret(endpoint.id)
        assert rotated.secret != endpoint.secret
        following = hooks.payment_intents.create(**intent_params(2))
        after = receiver.delivery_of(following.id)
        assert len(after["headers"]["webhook-signature"].split(" ")) == 2, "signed with both secrets for a day"
        assert payments_api.webhooks.verify(after["body"], after["headers"], rotated.secret).data.object["id"] == following.id
        assert payments_api.webhooks.verify(after["body"], after["headers"], endpoint.secret).data.object["id"] == following.id
        rejected(delivery["body"], delivery["headers"], rotated.secret, "signature")

        # The server records the attempt once it has the receiver's answer.
        record = until("the delivery's record", lambda: hooks.events.deliveries(event.id).data)
        assert record[0].status_code == 204
        deleted = hooks.webhook_endpoints.delete(endpoint.id)
        assert (deleted.id, deleted.deleted) == (endpoint.id, True)
    finally:
        receiver.close()
