"""Typed errors: one class per kind of answer, every documented ``code`` mapped (docs/api.md)."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type


class PaymentsApiError(Exception):
    """Every error the API, or the way to it, gives.

    ``retryable``: the kind the library retries (seen here only once the retries ran out).
    ``outcome_unknown``: the request may have been applied; look ``idempotency_key`` up
    (``api.idempotency_keys.retrieve``) or retry with the same key to learn its outcome.
    """

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        code: str = "",
        detail: str = "",
        request_id: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        attempts: int = 1,
        replayed: bool = False,
        retryable: bool = False,
        outcome_unknown: bool = False,
        headers: Optional[Mapping[str, str]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.detail = detail
        self.request_id = request_id
        self.idempotency_key = idempotency_key
        self.attempts = attempts
        self.replayed = replayed
        self.retryable = retryable
        self.outcome_unknown = outcome_unknown
        self.headers: Dict[str, str] = dict(headers or {})


class InvalidRequestError(PaymentsApiError):
    """400, 405, 408, 413: the request must change."""


class AuthenticationError(PaymentsApiError):
    """401: the API key is missing, unknown, revoked or expired."""


class NotFoundError(PaymentsApiError):
    """404: absent, or another merchant's."""


class ConflictError(PaymentsApiError):
    """409: the resource's state forbids it (a cancel of a paid intent, a refund past the payment)."""


class IdempotencyError(PaymentsApiError):
    """The idempotency layer's own answers: a malformed, missing, reused, in-flight or lost key."""


class UnsupportedError(PaymentsApiError):
    """422: this server cannot do it for that chain or token."""


class RateLimitError(PaymentsApiError):
    """429: past the merchant's limits; nothing was done."""


class ServerError(PaymentsApiError):
    """500: the server failed; on a POST its stored answer, so the outcome is indeterminate."""


class UnavailableError(PaymentsApiError):
    """502, 503, 504: the server or a proxy in front of it could not answer now."""


class ApiConnectionError(PaymentsApiError):
    """No answer: the connection failed or the attempt timed out (a POST may have arrived)."""


class WebhookVerificationError(Exception):
    """A webhook delivery not signed by the secret, or signed too long ago."""


ERROR_CODES: Mapping[str, Type[PaymentsApiError]] = {
    "invalid_request": InvalidRequestError,
    "method_not_allowed": InvalidRequestError,
    "request_timeout": InvalidRequestError,
    "payload_too_large": InvalidRequestError,
    "unauthorized": AuthenticationError,
    "not_found": NotFoundError,
    "invalid_state_transition": ConflictError,
    "refund_exceeds_payment": ConflictError,
    "payment_in_progress": ConflictError,
    "payment_identifier_reused": ConflictError,
    "idempotency_key_invalid": IdempotencyError,
    "idempotency_key_missing": IdempotencyError,
    "idempotency_key_in_flight": IdempotencyError,
    "idempotency_key_lease_lost": IdempotencyError,
    "idempotency_key_reused": IdempotencyError,
    "token_not_supported": UnsupportedError,
    "chain_not_settled": UnsupportedError,
    "permit2_allowance_required": UnsupportedError,
    "rate_limited": RateLimitError,
    "internal_error": ServerError,
    "unavailable": UnavailableError,
}

_BY_STATUS: Mapping[int, Type[PaymentsApiError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    404: NotFoundError,
    405: InvalidRequestError,
    408: InvalidRequestError,
    409: ConflictError,
    413: InvalidRequestError,
    422: UnsupportedError,
    429: RateLimitError,
    500: ServerError,
    502: UnavailableError,
    503: UnavailableError,
    504: UnavailableError,
}


def retryable_answer(status: int, code: str) -> bool:
    """Answers a later attempt with the same key can change: the first attempt still running or
    taken over (409), the merchant's limits (429), a server or proxy that could not answer."""
    if status == 409:
        return code in ("idempotency_key_in_flight", "idempotency_key_lease_lost")
    return status in (429, 502, 503, 504)


def error_from_response(
    status: int,
    body: Any,
    headers: Optional[Mapping[str, str]] = None,
    *,
    method: str = "GET",
    idempotency_key: Optional[str] = None,
    attempts: int = 1,
    possibly_applied: bool = False,
) -> PaymentsApiError:
    """The error for an answer that is not 2xx; ``attempts`` and ``possibly_applied`` describe the
    whole call (``possibly_applied``: an earlier attempt got no answer, or a retryable one)."""
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    parsed = body if isinstance(body, dict) and isinstance(body.get("error"), str) else None
    if parsed is not None:
        code, detail = parsed["error"], str(parsed.get("detail", ""))
    else:
        code = {502: "bad_gateway", 504: "gateway_timeout"}.get(status, f"http_{status}")
        detail = body[:200] if isinstance(body, str) else ""
    replayed = headers.get("idempotent-replayed") == "true"
    retryable = retryable_answer(status, code)
    keyed = method == "POST" and idempotency_key is not None
    # A 500 on a POST is the answer the server stored for the key: a retry replays it, and it does
    # not say whether the work happened. A retryable answer other than 429 may follow an attempt
    # that did the work (a lost answer, a first attempt still running).
    if status >= 500 and not retryable:
        outcome_unknown = keyed
    else:
        outcome_unknown = keyed and retryable and (possibly_applied or status != 429)
    message = f"{status} {code}: {detail}"
    if attempts > 1:
        message += f" (after {attempts} attempts)"
    if outcome_unknown and status == 500:
        stored = "Replayed: this is the answer the server stored for" if replayed else "The server stored this answer for"
        message += (
            f". {stored} Idempotency-Key {idempotency_key!r}; the outcome is indeterminate: look the key up"
            " (idempotency_keys.retrieve) before acting on it"
        )
    elif outcome_unknown:
        message += f". The request may have been applied: retry with Idempotency-Key {idempotency_key!r} to learn its outcome"
    elif keyed:
        message += f" [Idempotency-Key {idempotency_key!r}]"
    cls = ERROR_CODES.get(code) or _BY_STATUS.get(status) or (ServerError if status >= 500 else PaymentsApiError)
    return cls(
        message,
        status=status,
        code=code,
        detail=detail,
        request_id=headers.get("x-request-id"),
        idempotency_key=idempotency_key if keyed else None,
        attempts=attempts,
        replayed=replayed,
        retryable=retryable,
        outcome_unknown=outcome_unknown,
        headers=headers,
    )


def connection_error(
    cause: BaseException,
    *,
    timed_out: bool,
    timeout: Optional[float],
    method: str,
    idempotency_key: Optional[str],
    attempts: int,
    request_id: Optional[str],
) -> ApiConnectionError:
    keyed = method == "POST" and idempotency_key is not None
    detail = f"no answer within {timeout} s" if timed_out else f"the connection failed: {cause!r}"
    if attempts > 1:
        detail += f" (after {attempts} attempts)"
    message = detail
    if keyed:
        message += f". The request may have been applied: retry with Idempotency-Key {idempotency_key!r} to learn its outcome"
    return ApiConnectionError(
        message,
        code="timeout" if timed_out else "connection_error",
        detail=detail,
        request_id=request_id,
        idempotency_key=idempotency_key if keyed else None,
        attempts=attempts,
        retryable=True,
        outcome_unknown=keyed,
    )
