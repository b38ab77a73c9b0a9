"""The base of every generated model (``models.py``): tolerant of fields a newer server adds, and
carrying what answered the call that returned it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

from pydantic import BaseModel, ConfigDict, PrivateAttr


@dataclass(frozen=True)
class ResponseInfo:
    """What answered: ``status``, the server's ``request_id``, the ``idempotency_key`` every
    attempt of a POST carried, how many ``attempts`` the call took, whether the answer was the
    server's stored one (``replayed``) and its headers."""

    status: int
    request_id: Optional[str]
    idempotency_key: Optional[str]
    attempts: int
    replayed: bool
    headers: Dict[str, str] = field(default_factory=dict, repr=False)


class ApiModel(BaseModel):
    # A field this version does not know yet is kept, not an error: servers grow first.
    model_config = ConfigDict(extra="allow")

    _last_response: Optional[ResponseInfo] = PrivateAttr(default=None)

    @property
    def last_response(self) -> Optional[ResponseInfo]:
        """What answered the call that returned this object (``None`` for a listed item)."""
        return self._last_response
