"""Every error code the API documents is mapped to a class, and classified as retried or not as
the contract says. The codes are read from docs/api.md and openapi.json, so a new code fails here
until it is mapped."""

from __future__ import annotations

import json
import re
import time
from email.utils import formatdate

import payments_api
from payments_api import ERROR_CODES, error_from_response

from .conftest import ROOT


def documented_codes() -> dict:
    codes: dict = {}
    doc = (ROOT / "docs/api.md").read_text()
    table = doc[doc.index("## Errors") : doc.index("A 503 says what the server knows")]
    for status, cell in re.findall(r"^\| (\d{3}) \| (.*?) \|", table, re.M):
        for code in re.findall(r"`([a-z][a-z0-9_]*)`", cell):
            codes[code] = int(status)
    api = json.loads((ROOT / "openapi.json").read_text())
    states = set(api["components"]["schemas"]["IntentState"]["enum"])
    for operations in api["paths"].values():
        for operation in operations.values():
            for status, answer in operation.get("responses", {}).items():
                if status[0] in "45":
                    for code in re.findall(r"`([a-z][a-z0-9_]*)`", answer.get("description", "")):
                        if code not in states:
                            codes.setdefault(code, int(status))
    return codes


def test_every_documented_code_is_mapped_and_nothing_else():
    codes = documented_codes()
    assert len(codes) >= 20, f"only {len(codes)} codes found: the docs' table moved?"
    assert sorted(codes) == sorted(ERROR_CODES)


def test_each_code_becomes_its_class_retried_only_where_a_retry_can_change_the_answer():
    retried = {"idempotency_key_in_flight", "idempotency_key_lease_lost", "rate_limited", "unavailable"}
    for code, status in documented_codes().items():
        error = error_from_response(
            status, {"error": code, "detail": "d"}, {"X-Request-Id": "req-1"}, method="POST", idempotency_key="k-1"
        )
        assert isinstance(error, ERROR_CODES[code]), code
        assert isinstance(error, payments_api.PaymentsApiError)
        assert (error.code, error.status, error.request_id, error.idempotency_key) == (code, status, "req-1", "k-1")
        assert error.retryable == (code in retried), code
        # Definite refusals leave nothing to look up; a 500 and the transient ones may hide a done POST.
        assert error.outcome_unknown == (status == 500 or (code in retried and code != "rate_limited")), code


def test_a_replayed_500_says_the_outcome_is_indeterminate_and_names_the_key():
    error = error_from_response(
        500, {"error": "internal_error", "detail": "boom"}, {"Idempotent-Replayed": "true"}, method="POST", idempotency_key="order-77"
    )
    assert isinstance(error, payments_api.ServerError)
    assert error.replayed and error.outcome_unknown and not error.retryable
    assert "indeterminate" in str(error) and "'order-77'" in str(error)


def test_proxies_own_answers_are_typed_too():
    gateway = error_from_response(502, "<html>502 Bad Gateway</html>")
    assert isinstance(gateway, payments_api.UnavailableError)
    assert (gateway.code, gateway.retryable, gateway.outcome_unknown) == ("bad_gateway", True, False)
    assert error_from_response(504, "").code == "gateway_timeout"


def test_retry_after_is_waited_capped_and_backoff_is_full_jitter():
    assert payments_api.retry_delay(0, "2", 0.1, 1.0, 5.0) == 2.0
    assert payments_api.retry_delay(0, "3600", 0.1, 1.0, 5.0) == 5.0
    from_date = payments_api.retry_delay(0, formatdate(time.time() + 3, usegmt=True), 0.1, 1.0, 5.0)
    assert 1.0 < from_date <= 3.0
    for retry in range(8):
        ceiling = min(1.0, 0.1 * 2**retry)
        delays = [payments_api.retry_delay(retry, None, 0.1, 1.0, 5.0) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        # Full jitter spreads over the whole range rather than clustering at the ceiling.
        assert min(delays) < ceiling / 4 and max(delays) > ceiling * 3 / 4
