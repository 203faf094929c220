"""Who is asking: the owner an API key stands for (``auth = "keys"``), or anyone (``auth = "open"``).

Keys mode: every ``/v1`` request carries ``Authorization: Bearer <secret>``; a missing, unknown or
revoked key is a 401 (one message for all three: a revoked key is not told apart from a wrong one).
The key is looked up in SQL on every request, by the hash of its secret, with no cache: a revocation
holds from the next request on. A response belongs to the owner of the key that created it; to any
other owner it does not exist (404, the same as an unknown id: no 403 that would confirm it exists).

Open mode: no key is asked for and every response is visible to everyone; ``log_auth_mode`` says so
loudly when the API starts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from oss_responses.config import Settings
from oss_responses.errors import Unauthorized
from oss_responses.storage import ApiKeyRecord, AsyncDatabase, ResponseRecord, find_active_key

log = logging.getLogger(__name__)

MISSING_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header using "
    "Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
)
INCORRECT_KEY = "Incorrect API key provided. Ask this service's operator for a key (python -m oss_responses.keys)."


@dataclass(frozen=True, slots=True)
class Owner:
    """Who a request acts for: ``name`` None in open mode (everything is visible, nothing is limited)."""

    name: str | None
    models: frozenset[str] | None = None  # None: every served model
    max_background: int | None = None  # None or <= 0: no limit
    max_in_flight: int | None = None  # responses of any kind; None or <= 0: no limit

    def may_see(self, record: ResponseRecord) -> bool:
        return self.name is None or record.owner == self.name

    def may_use(self, model: str) -> bool:
        return self.models is None or model in self.models

    def usable(self, served: Sequence[str]) -> list[str]:
        """The served models this owner may use, in the settings' order."""
        return [model for model in served if self.may_use(model)]

    @property
    def background_limit(self) -> int | None:
        return _limit(self.name, self.max_background)

    @property
    def in_flight_limit(self) -> int | None:
        return _limit(self.name, self.max_in_flight)


def _limit(owner: str | None, limit: int | None) -> int | None:
    """None (no limit) in open mode, or for a limit of 0."""
    return None if owner is None or not limit or limit <= 0 else limit


OPEN = Owner(name=None)


async def authenticate(settings: Settings, db: AsyncDatabase, authorization: str | None) -> Owner:
    if settings.auth == "open":
        return OPEN
    secret = _bearer_secret(authorization)
    key = await db.run(find_active_key, secret)
    if key is None:
        raise _unauthorized(INCORRECT_KEY)
    return owner_of(key, settings)


def owner_of(key: ApiKeyRecord, settings: Settings) -> Owner:
    limit = key.max_background if key.max_background is not None else settings.max_background_per_key
    return Owner(name=key.owner, models=None if key.models is None else frozenset(key.models), max_background=limit,
                 max_in_flight=settings.max_in_flight_per_key)


def _bearer_secret(authorization: str | None) -> str:
    scheme, _, secret = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise _unauthorized(MISSING_KEY)
    return secret.strip()


def _unauthorized(message: str) -> Unauthorized:
    return Unauthorized(message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def log_auth_mode(settings: Settings) -> None:
    if settings.auth == "open":
        log.warning(
            "OSS_RESPONSES_AUTH=open: this API asks for no API key, and anyone who can reach it can read, "
            "continue, cancel and delete every response. Set OSS_RESPONSES_AUTH=keys for any shared deployment "
            "(keys: python -m oss_responses.keys create --owner NAME)."
        )
    else:
        log.info("OSS_RESPONSES_AUTH=keys: every /v1 request needs an API key")
