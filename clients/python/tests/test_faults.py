"""1000 creates through the fault proxy: with the library, exactly 1000 intents, each the one the
server stored for its call's key; with plain HTTP and a new key per attempt, duplicates."""

from __future__ import annotations

import asyncio
import os
import re
import uuid

import httpx
import pytest

import payments_api

from .conftest import UUID_V4, intent_params
from .fault_proxy import FaultProxy, fault_mix

N = 1000
WIDTH = 16
TIMEOUT = 1.0


async def in_pool(n, width, task):
    """Runs ``task(i)`` for i < n, ``width`` at a time; every outcome (a value or an exception)."""
    outcomes: list = [None] * n
    queue = iter(range(n))

    async def worker():
        for i in queue:
            try:
                outcomes[i] = await task(i)
            except Exception as exc:  # noqa: BLE001 - kept and asserted on below
                outcomes[i] = exc

    await asyncio.gather(*(worker() for _ in range(width)))
    return outcomes


# The run on Python 3.9 (scripts/clients-test.sh) leaves this load out: CLIENTS_PY_SKIP_LOAD=1.
@pytest.mark.skipif(os.environ.get("CLIENTS_PY_SKIP_LOAD") == "1", reason="the load run: on the first Python only")
def test_1000_creates_through_dropped_late_and_502_answers(stack, capsys):
    proxy = FaultProxy(stack.base, fault_mix(), hold=TIMEOUT + 0.3)
    try:
        library = asyncio.run(library_run(proxy.url, stack.base))
        plain = asyncio.run(plain_run(proxy.url, stack.base))
    finally:
        proxy.close()
    assert proxy.counts["reset"] > 50 and proxy.counts["hold"] > 20 and proxy.counts["bad_gateway"] > 20, proxy.counts
    assert plain > N, f"plain HTTP made {plain} intents"
    with capsys.disabled():
        print(f"\nwith the library's retries: {library['stored']} intents for {N} creates "
              f"({library['retried']} calls retried, {library['replayed']} answered by replay)")
        print(f"plain HTTP, a new key per attempt: {plain} intents for {N} creates ({plain - N} duplicates)")
        print(f"proxy fates: {proxy.counts}")


async def library_run(proxy_url: str, base: str) -> dict:
    async with payments_api.AsyncPaymentsApi(
        api_key="merchant-faults", base_url=proxy_url, timeout=TIMEOUT, retry_base_delay=0.02, retry_max_delay=0.25,
        # 20% of attempts fail: ten retries leave one call in ten million to chance.
        max_retries=10,
    ) as faulty:
        outcomes = await in_pool(N, WIDTH, lambda i: faulty.payment_intents.create(**intent_params(i)))
    failed = [f"{type(o).__name__}: {o}" for o in outcomes if isinstance(o, Exception)]
    assert failed == [], "no call may fail"

    async with payments_api.AsyncPaymentsApi(api_key="merchant-faults", base_url=base) as direct:
        stored = [intent async for intent in direct.payment_intents.list()]
        assert len(stored) == N, "intents stored for 1000 creates"
        by_id = {intent.id: intent for intent in stored}
        assert len({intent.metadata["call"] for intent in stored}) == N, "one intent per call"

        async def check(i: int) -> None:
            result = outcomes[i]
            key = result.last_response.idempotency_key
            assert re.match(UUID_V4, key)
            record = await direct.idempotency_keys.retrieve(key)
            assert record.resource_id == result.id, f"call {i} got the intent stored for its key"
            assert record.response_status == 201
            assert result.model_dump() == by_id[result.id].model_dump(), f"call {i} returned the intent as stored"
            assert result.metadata["call"] == str(i)

        checked = await in_pool(N, WIDTH, check)
    assert [c for c in checked if isinstance(c, Exception)] == []
    assert len({r.last_response.idempotency_key for r in outcomes}) == N, "a key per logical call, never shared"
    replayed = sum(r.last_response.replayed for r in outcomes)
    assert replayed > 0, "lost answers were learned by replay"
    return {"stored": len(stored), "retried": sum(r.last_response.attempts > 1 for r in outcomes), "replayed": replayed}


async def plain_run(proxy_url: str, base: str) -> int:
    """The same creates without the library's retries: a client that sends again with a new key."""
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:

        async def create(i: int) -> dict:
            for _ in range(50):
                try:
                    answer = await http.post(
                        f"{proxy_url}/v1/payment_intents",
                        json=intent_params(i),
                        headers={"authorization": "Bearer merchant-plain", "idempotency-key": str(uuid.uuid4())},
                    )
                    if answer.status_code == 201:
                        return answer.json()
                except httpx.HTTPError:
                    pass  # lost: send it again, as a fresh request
            raise AssertionError(f"call {i} never got a 201")

        outcomes = await in_pool(N, WIDTH, create)
    assert [o for o in outcomes if isinstance(o, Exception)] == []
    async with payments_api.AsyncPaymentsApi(api_key="merchant-plain", base_url=base) as direct:
        return len([intent async for intent in direct.payment_intents.list()])
