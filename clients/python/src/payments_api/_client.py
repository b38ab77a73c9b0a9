"""The transport around the generated models: one Idempotency-Key per logical call, reused by
all its retries; which answers are retried and how long to wait; typed errors; pagination.

The retry decisions live in ``_Call``, which does no I/O, so the sync and async clients share
them and differ only in how they send and wait.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from email.utils import parsedate_to_datetime
from typing import Any, AsyncIterator, Dict, Generic, Iterator, List, Mapping, Optional, Type, TypeVar, Union
from urllib.parse import quote

import httpx

from ._base import ApiModel, ResponseInfo
from ._errors import connection_error, error_from_response
from .models import (
    AuthorizationDocument,
    Balances,
    Deleted,
    DeliveryList,
    Endpoint,
    Event,
    KeyRecord,
    Merchant,
    PaymentIntent,
    Refund,
)

M = TypeVar("M", bound=ApiModel)

DEFAULT_TIMEOUT = 30.0  # seconds; past the server's own REQUEST_TIMEOUT_SECONDS (25)
DEFAULT_MAX_RETRIES = 3
RETRY_BASE_DELAY = 0.5
RETRY_MAX_DELAY = 8.0
RETRY_AFTER_MAX = 20.0  # a longer Retry-After is waited this long: never hang on a bad header

# Failures with no answer, after which the request may or may not have arrived. Other transport
# errors (a malformed header, an unsupported URL) are the caller's and are raised as they are.
_NO_ANSWER = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def retry_delay(retry_index: int, retry_after: Optional[str], base: float, ceiling: float, retry_after_max: float) -> float:
    """Seconds before the next attempt: the server's Retry-After (seconds or an HTTP date), capped,
    when it sent one; else exponential backoff with full jitter."""
    if retry_after:
        try:
            seconds = float(retry_after)
        except ValueError:
            try:
                seconds = parsedate_to_datetime(retry_after).timestamp() - time.time()
            except (TypeError, ValueError):
                seconds = None  # type: ignore[assignment]
        if seconds is not None:
            return min(max(seconds, 0.0), retry_after_max)
    return random.uniform(0, min(ceiling, base * 2**retry_index))


def _segment(value: str) -> str:
    return quote(value, safe="")


class _Call:
    """One logical call and its attempts."""

    def __init__(
        self,
        owner: "_BaseClient",
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        body: Any = None,
        idempotency_key: Optional[str] = None,
        max_retries: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.owner = owner
        self.method = method
        self.url = owner.base_url + path
        self.query = {k: v for k, v in (query or {}).items() if v is not None}
        # One key for the call, the same on every attempt: the server executes it once.
        self.key = (idempotency_key or str(uuid.uuid4())) if method == "POST" else None
        # Serialized once: the server fingerprints the raw bytes, so every retry sends these.
        self.content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        self.max_retries = owner.max_retries if max_retries is None else max_retries
        self.timeout = owner.timeout if timeout is None else timeout
        self.attempt = 0
        self.request_id: Optional[str] = None
        self.possibly_applied = False

    def request(self, http: Union[httpx.Client, httpx.AsyncClient]) -> httpx.Request:
        self.attempt += 1
        self.request_id = str(uuid.uuid4())
        headers = {
            "authorization": f"Bearer {self.owner.api_key}",
            "accept": "application/json",
            "x-request-id": self.request_id,
        }
        if self.content is not None:
            headers["content-type"] = "application/json"
        if self.key is not None:
            headers["idempotency-key"] = self.key
        return http.build_request(
            self.method, self.url, params=self.query, content=self.content, headers=headers, timeout=self.timeout
        )

    def answered(self, response: httpx.Response) -> "Union[_Done, float]":
        """The call's result, or seconds to wait before the next attempt; raises the final error."""
        headers = {k.lower(): v for k, v in response.headers.items()}
        text = response.text
        try:
            body: Any = json.loads(text) if text else None
        except ValueError:
            body = text
        if 200 <= response.status_code < 300:
            info = ResponseInfo(
                status=response.status_code,
                request_id=headers.get("x-request-id"),
                idempotency_key=self.key,
                attempts=self.attempt,
                replayed=headers.get("idempotent-replayed") == "true",
                headers=headers,
            )
            return _Done(body, info)
        error = error_from_response(
            response.status_code,
            body,
            headers,
            method=self.method,
            idempotency_key=self.key,
            attempts=self.attempt,
            possibly_applied=self.possibly_applied,
        )
        if not error.retryable or self.attempt > self.max_retries:
            raise error
        if response.status_code != 429:
            self.possibly_applied = True
        return self.owner._delay(self.attempt - 1, headers.get("retry-after"))

    def failed(self, exc: BaseException) -> float:
        """No answer: the request may have arrived and been applied. Seconds to wait, or raises."""
        self.possibly_applied = True
        if self.attempt > self.max_retries:
            raise connection_error(
                exc,
                timed_out=isinstance(exc, httpx.TimeoutException),
                timeout=self.timeout,
                method=self.method,
                idempotency_key=self.key,
                attempts=self.attempt,
                request_id=self.request_id,
            ) from exc
        return self.owner._delay(self.attempt - 1, None)


class _Done:
    def __init__(self, body: Any, info: ResponseInfo) -> None:
        self.body = body
        self.info = info


def _parse(done: _Done, model: Optional[Type[M]]) -> Any:
    if model is None:
        return done.body
    value = model.model_validate(done.body)
    value._last_response = done.info
    return value


class _BaseClient:
    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout: float = DEFAULT_TIMEOUT,
        retry_base_delay: float = RETRY_BASE_DELAY,
        retry_max_delay: float = RETRY_MAX_DELAY,
        retry_after_max: float = RETRY_AFTER_MAX,
    ) -> None:
        if not api_key:
            raise ValueError("api_key is required")
        if not base_url:
            raise ValueError("base_url is required (e.g. http://localhost:8080)")
        self.api_key = api_key
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.timeout = timeout
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.retry_after_max = retry_after_max

    def _delay(self, retry_index: int, retry_after: Optional[str]) -> float:
        return retry_delay(retry_index, retry_after, self.retry_base_delay, self.retry_max_delay, self.retry_after_max)


class Pager(Generic[M]):
    """Every item of every page, newest first: ``for intent in api.payment_intents.list()``.
    ``limit`` is the page size (100 unless given); each page starts after the last id of the one
    before."""

    def __init__(self, client: "PaymentsApi", path: str, params: Dict[str, Any], model: Type[M]) -> None:
        self._client, self._path, self._params, self._model = client, path, params, model

    def pages(self) -> Iterator[List[M]]:
        query = {"limit": 100, **self._params}
        while True:
            page = self._client.request("GET", self._path, query=query)
            yield [self._model.model_validate(item) for item in page["data"]]
            if not page.get("has_more") or not page["data"]:
                return
            query["starting_after"] = page["data"][-1]["id"]

    def __iter__(self) -> Iterator[M]:
        for page in self.pages():
            yield from page


class AsyncPager(Generic[M]):
    """Every item of every page: ``async for intent in api.payment_intents.list()``."""

    def __init__(self, client: "AsyncPaymentsApi", path: str, params: Dict[str, Any], model: Type[M]) -> None:
        self._client, self._path, self._params, self._model = client, path, params, model

    async def pages(self) -> AsyncIterator[List[M]]:
        query = {"limit": 100, **self._params}
        while True:
            page = await self._client.request("GET", self._path, query=query)
            yield [self._model.model_validate(item) for item in page["data"]]
            if not page.get("has_more") or not page["data"]:
                return
            query["starting_after"] = page["data"][-1]["id"]

    async def __aiter__(self) -> AsyncIterator[M]:
        async for page in self.pages():
            for item in page:
                yield item


class PaymentsApi(_BaseClient):
    """The synchronous client: ``PaymentsApi(api_key=..., base_url=..., max_retries=3, timeout=30.0)``.

    ``timeout`` is per attempt (seconds); ``http_client`` an ``httpx.Client`` of your own (proxies,
    transports), closed by you."""

    def __init__(self, *, api_key: str, base_url: str, http_client: Optional[httpx.Client] = None, **options: Any) -> None:
        super().__init__(api_key=api_key, base_url=base_url, **options)
        self._own_http = http_client is None
        self._http = http_client or httpx.Client()
        self.payment_intents = PaymentIntents(self)
        self.refunds = Refunds(self)
        self.events = Events(self)
        self.webhook_endpoints = WebhookEndpoints(self)
        self.balances = BalancesResource(self)
        self.idempotency_keys = IdempotencyKeys(self)
        self.merchant = MerchantResource(self)

    def request(self, method: str, path: str, *, model: Optional[Type[M]] = None, **options: Any) -> Any:
        """Any call through the same keys, retries and errors: ``api.request("GET", "/v1/balances")``."""
        call = _Call(self, method, path, **options)
        while True:
            try:
                response = self._http.send(call.request(self._http))
            except _NO_ANSWER as exc:
                time.sleep(call.failed(exc))
                continue
            outcome = call.answered(response)
            if isinstance(outcome, _Done):
                return _parse(outcome, model)
            time.sleep(outcome)

    def _list(self, path: str, params: Dict[str, Any], model: Type[M]) -> Pager[M]:
        return Pager(self, path, params, model)

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> "PaymentsApi":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncPaymentsApi(_BaseClient):
    """The asyncio client, the same surface as ``PaymentsApi`` with ``await`` and ``async for``."""

    def __init__(self, *, api_key: str, base_url: str, http_client: Optional[httpx.AsyncClient] = None, **options: Any) -> None:
        super().__init__(api_key=api_key, base_url=base_url, **options)
        self._own_http = http_client is None
        self._http = http_client or httpx.AsyncClient()
        self.payment_intents = AsyncPaymentIntents(self)
        self.refunds = AsyncRefunds(self)
        self.events = AsyncEvents(self)
        self.webhook_endpoints = AsyncWebhookEndpoints(self)
        self.balances = AsyncBalancesResource(self)
        self.idempotency_keys = AsyncIdempotencyKeys(self)
        self.merchant = AsyncMerchantResource(self)

    async def request(self, method: str, path: str, *, model: Optional[Type[M]] = None, **options: Any) -> Any:
        call = _Call(self, method, path, **options)
        while True:
            try:
                response = await self._http.send(call.request(self._http))
            except _NO_ANSWER as exc:
                await asyncio.sleep(call.failed(exc))
                continue
            outcome = call.answered(response)
            if isinstance(outcome, _Done):
                return _parse(outcome, model)
            await asyncio.sleep(outcome)

    def _list(self, path: str, params: Dict[str, Any], model: Type[M]) -> AsyncPager[M]:
        return AsyncPager(self, path, params, model)

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> "AsyncPaymentsApi":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# The resources. Each method names its route and its model; the sync and async sets differ only
# in `await`. `idempotency_key=None` means a fresh UUID v4 for the call.


class _Resource:
    def __init__(self, client: Any) -> None:
        self._c = client


class PaymentIntents(_Resource):
    def create(self, *, idempotency_key: Optional[str] = None, **params: Any) -> PaymentIntent:
        return self._c.request("POST", "/v1/payment_intents", body=params, idempotency_key=idempotency_key, model=PaymentIntent)

    def retrieve(self, id: str) -> PaymentIntent:
        return self._c.request("GET", f"/v1/payment_intents/{_segment(id)}", model=PaymentIntent)

    def list(self, **params: Any) -> Pager[PaymentIntent]:
        return self._c._list("/v1/payment_intents", params, PaymentIntent)

    def cancel(self, id: str, *, idempotency_key: Optional[str] = None) -> PaymentIntent:
        return self._c.request("POST", f"/v1/payment_intents/{_segment(id)}/cancel", body={}, idempotency_key=idempotency_key, model=PaymentIntent)

    def authorization(self, id: str, **params: Any) -> AuthorizationDocument:
        return self._c.request("GET", f"/v1/payment_intents/{_segment(id)}/authorization", query=params, model=AuthorizationDocument)

    def confirm(self, id: str, *, idempotency_key: Optional[str] = None, **params: Any) -> PaymentIntent:
        return self._c.request("POST", f"/v1/payment_intents/{_segment(id)}/confirm", body=params, idempotency_key=idempotency_key, model=PaymentIntent)


class Refunds(_Resource):
    def create(self, payment_intent: str, *, idempotency_key: Optional[str] = None, **params: Any) -> Refund:
        return self._c.request("POST", f"/v1/payment_intents/{_segment(payment_intent)}/refunds", body=params, idempotency_key=idempotency_key, model=Refund)

    def retrieve(self, id: str) -> Refund:
        return self._c.request("GET", f"/v1/refunds/{_segment(id)}", model=Refund)

    def list(self, **params: Any) -> Pager[Refund]:
        return self._c._list("/v1/refunds", params, Refund)

    def authorization(self, id: str) -> AuthorizationDocument:
        return self._c.request("GET", f"/v1/refunds/{_segment(id)}/authorization", model=AuthorizationDocument)

    def confirm(self, id: str, *, idempotency_key: Optional[str] = None, **params: Any) -> Refund:
        return self._c.request("POST", f"/v1/refunds/{_segment(id)}/confirm", body=params, idempotency_key=idempotency_key, model=Refund)


class Events(_Resource):
    def list(self, **params: Any) -> Pager[Event]:
        return self._c._list("/v1/events", params, Event)

    def retrieve(self, id: str) -> Event:
        return self._c.request("GET", f"/v1/events/{_segment(id)}", model=Event)

    def deliveries(self, id: str) -> DeliveryList:
        return self._c.request("GET", f"/v1/events/{_segment(id)}/deliveries", model=DeliveryList)


class WebhookEndpoints(_Resource):
    def create(self, *, idempotency_key: Optional[str] = None, **params: Any) -> Endpoint:
        return self._c.request("POST", "/v1/webhook_endpoints", body=params, idempotency_key=idempotency_key, model=Endpoint)

    def retrieve(self, id: str) -> Endpoint:
        return self._c.request("GET", f"/v1/webhook_endpoints/{_segment(id)}", model=Endpoint)

    def list(self) -> Pager[Endpoint]:
        return self._c._list("/v1/webhook_endpoints", {}, Endpoint)

    def delete(self, id: str) -> Deleted:
        return self._c.request("DELETE", f"/v1/webhook_endpoints/{_segment(id)}", model=Deleted)

    def rotate_secret(self, id: str, *, idempotency_key: Optional[str] = None) -> Endpoint:
        return self._c.request("POST", f"/v1/webhook_endpoints/{_segment(id)}/rotate_secret", body={}, idempotency_key=idempotency_key, model=Endpoint)


class BalancesResource(_Resource):
    def list(self) -> Balances:
        return self._c.request("GET", "/v1/balances", model=Balances)


class IdempotencyKeys(_Resource):
    def retrieve(self, key: str) -> KeyRecord:
        return self._c.request("GET", f"/v1/idempotency_keys/{_segment(key)}", model=KeyRecord)


class MerchantResource(_Resource):
    def retrieve(self) -> Merchant:
        return self._c.request("GET", "/v1/merchant", model=Merchant)

    def update(self, *, idempotency_key: Optional[str] = None, **params: Any) -> Merchant:
        return self._c.request("POST", "/v1/merchant", body=params, idempotency_key=idempotency_key, model=Merchant)


class AsyncPaymentIntents(_Resource):
    async def create(self, *, idempotency_key: Optional[str] = None, **params: Any) -> PaymentIntent:
        return await self._c.request("POST", "/v1/payment_intents", body=params, idempotency_key=idempotency_key, model=PaymentIntent)

    async def retrieve(self, id: str) -> PaymentIntent:
        return await self._c.request("GET", f"/v1/payment_intents/{_segment(id)}", model=PaymentIntent)

    def list(self, **params: Any) -> AsyncPager[PaymentIntent]:
        return self._c._list("/v1/payment_intents", params, PaymentIntent)

    async def cancel(self, id: str, *, idempotency_key: Optional[str] = None) -> PaymentIntent:
        return await self._c.request("POST", f"/v1/payment_intents/{_segment(id)}/cancel", body={}, idempotency_key=idempotency_key, model=PaymentIntent)

    async def authorization(self, id: str, **params: Any) -> AuthorizationDocument:
        return await self._c.request("GET", f"/v1/payment_intents/{_segment(id)}/authorization", query=params, model=AuthorizationDocument)

    async def confirm(self, id: str, *, idempotency_key: Optional[str] = None, **params: Any) -> PaymentIntent:
        return await self._c.request("POST", f"/v1/payment_intents/{_segment(id)}/confirm", body=params, idempotency_key=idempotency_key, model=PaymentIntent)


class AsyncRefunds(_Resource):
    async def create(self, payment_intent: str, *, idempotency_key: Optional[str] = None, **params: Any) -> Refund:
        return await self._c.request("POST", f"/v1/payment_intents/{_segment(payment_intent)}/refunds", body=params, idempotency_key=idempotency_key, model=Refund)

    async def retrieve(self, id: str) -> Refund:
        return await self._c.request("GET", f"/v1/refunds/{_segment(id)}", model=Refund)

    def list(self, **params: Any) -> AsyncPager[Refund]:
        return self._c._list("/v1/refunds", params, Refund)

    async def authorization(self, id: str) -> AuthorizationDocument:
        return await self._c.request("GET", f"/v1/refunds/{_segment(id)}/authorization", model=AuthorizationDocument)

    async def confirm(self, id: str, *, idempotency_key: Optional[str] = None, **params: Any) -> Refund:
        return await self._c.request("POST", f"/v1/refunds/{_segment(id)}/confirm", body=params, idempotency_key=idempotency_key, model=Refund)


class AsyncEvents(_Resource):
    def list(self, **params: Any) -> AsyncPager[Event]:
        return self._c._list("/v1/events", params, Event)

    async def retrieve(self, id: str) -> Event:
        return await self._c.request("GET", f"/v1/events/{_segment(id)}", model=Event)

    async def deliveries(self, id: str) -> DeliveryList:
        return await self._c.request("GET", f"/v1/events/{_segment(id)}/deliveries", model=DeliveryList)


class AsyncWebhookEndpoints(_Resource):
    async def create(self, *, idempotency_key: Optional[str] = None, **params: Any) -> Endpoint:
        return await self._c.request("POST", "/v1/webhook_endpoints", body=params, idempotency_key=idempotency_key, model=Endpoint)

    async def retrieve(self, id: str) -> Endpoint:
        return await self._c.request("GET", f"/v1/webhook_endpoints/{_segment(id)}", model=Endpoint)

    def list(self) -> AsyncPager[Endpoint]:
        return self._c._list("/v1/webhook_endpoints", {}, Endpoint)

    async def delete(self, id: str) -> Deleted:
        return await self._c.request("DELETE", f"/v1/webhook_endpoints/{_segment(id)}", model=Deleted)

    async def rotate_secret(self, id: str, *, idempotency_key: Optional[str] = None) -> Endpoint:
        return await self._c.request("POST", f"/v1/webhook_endpoints/{_segment(id)}/rotate_secret", body={}, idempotency_key=idempotency_key, model=Endpoint)


class AsyncBalancesResource(_Resource):
    async def list(self) -> Balances:
        return await self._c.request("GET", "/v1/balances", model=Balances)


class AsyncIdempotencyKeys(_Resource):
    async def retrieve(self, key: str) -> KeyRecord:
        return await self._c.request("GET", f"/v1/idempotency_keys/{_segment(key)}", model=KeyRecord)


class AsyncMerchantResource(_Resource):
    async def retrieve(self) -> Merchant:
        return await self._c.request("GET", "/v1/merchant", model=Merchant)

    async def update(self, *, idempotency_key: Optional[str] = None, **params: Any) -> Merchant:
        return await self._c.request("POST", "/v1/merchant", body=params, idempotency_key=idempotency_key, model=Merchant)


__all__ = ["PaymentsApi", "AsyncPaymentsApi", "Pager", "AsyncPager", "retry_delay"]
