"""payments-api's client: ``PaymentsApi`` and ``AsyncPaymentsApi`` on httpx, whose retries cannot
pay twice (one Idempotency-Key per call, reused by each of its retries), the models generated from
openapi.json (``payments_api.models``), and ``webhooks.verify``."""

from . import models, webhooks
from ._base import ApiModel, ResponseInfo
from ._client import AsyncPager, AsyncPaymentsApi, Pager, PaymentsApi, retry_delay
from ._errors import (
    ERROR_CODES,
    ApiConnectionError,
    AuthenticationError,
    ConflictError,
    IdempotencyError,
    InvalidRequestError,
    NotFoundError,
    PaymentsApiError,
    RateLimitError,
    ServerError,
    UnavailableError,
    UnsupportedError,
    WebhookVerificationError,
    error_from_response,
)
from ._version import __version__

__all__ = [
    "ERROR_CODES",
    "ApiConnectionError",
    "ApiModel",
    "AsyncPager",
    "AsyncPaymentsApi",
    "AuthenticationError",
    "ConflictError",
    "IdempotencyError",
    "InvalidRequestError",
    "NotFoundError",
    "Pager",
    "PaymentsApi",
    "PaymentsApiError",
    "RateLimitError",
    "ResponseInfo",
    "ServerError",
    "UnavailableError",
    "UnsupportedError",
    "WebhookVerificationError",
    "__version__",
    "error_from_response",
    "models",
    "retry_delay",
    "webhooks",
]
