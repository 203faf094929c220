"""Clients holding API keys of their own, for tests of the API in keys mode (``auth = "keys"``).

``KeyClients(api).new(owner, ...)`` creates a key in the API's database (as the CLI does) and gives
an official ``openai`` SDK client and a raw ``httpx2`` client that both send it as the Bearer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx2
from openai import OpenAI

from oss_responses.storage import create_api_key, revoke_api_key
from support.api_server import ApiServer
from support.sdk import http_client, sdk_client


@dataclass
class KeyClient:
    owner: str
    key_id: str
    secret: str
    sdk: OpenAI
    http: httpx2.Client


@dataclass
class KeyClients:
    api: ApiServer
    opened: list[KeyClient] = field(default_factory=list)

    def new(self, owner: str, *, models: Sequence[str] | None = None, max_background: int | None = None) -> KeyClient:
        record, secret = self.api.db.run(create_api_key, owner, models=models, max_background=max_background)
        client = KeyClient(
            owner=owner, key_id=record.id, secret=secret,
            sdk=sdk_client(f"{self.api.base_url}/v1", secret, max_retries=0, timeout=20),
            http=http_client(base_url=self.api.base_url, timeout=20, headers={"Authorization": f"Bearer {secret}"}),
        )
        self.opened.append(client)
        return client

    def revoke(self, client: KeyClient) -> None:
        assert self.api.db.run(revoke_api_key, client.key_id)

    def close(self) -> None:
        for client in self.opened:
            client.sdk.close()
            client.http.close()
