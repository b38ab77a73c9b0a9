"""Webhook verification with the Standard Webhooks library: the server signs every delivery as
that specification says (docs/api.md, "Webhooks")."""

from __future__ import annotations

from typing import Any, Mapping, Union

from standardwebhooks.webhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError as _LibraryError

from ._errors import WebhookVerificationError
from .models import Event


def verify(payload: Union[bytes, str], headers: Any, secret: str) -> Event:
    """The delivered event, once one of its signatures (two for a day after a rotation) is the
    secret's and its timestamp is within five minutes; else ``WebhookVerificationError``.

    ``payload`` is the raw body as received, never re-serialized JSON; ``headers`` any mapping
    (a dict, ``http.server``'s message, a framework's headers)."""
    plain: Mapping[str, str] = {str(name).lower(): str(value) for name, value in headers.items()}
    try:
        event = Webhook(secret).verify(payload, dict(plain))
    except (_LibraryError, ValueError) as exc:
        raise WebhookVerificationError(str(exc)) from exc
    return Event.model_validate(event)
