"""Content rules through the real gateway: real fakes of both wire kinds, both storage backends.

One gateway per backend serves each module (the fakes are wiped and the tenant's rules removed before every
test). Models: `gpt` (OpenAI-kind rows: chat, completions, responses, embeddings, decisions, images, videos,
and `/v1/messages` translated to chat), `claude` (an Anthropic-kind row: `/v1/messages` native, chat
translated).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from modelgate.storage import open_database
from tests.fakes import FakeUpstream
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config

UPSTREAM_KEY = "upstream-content-key"


def content_toml(storage_url: str, oai: FakeUpstream, anth: FakeUpstream) -> str:
    return f"""
[storage]
url = "{storage_url}"

[billing]
ledger_flush_interval_seconds = 0.05

[[providers]]
name = "openai"
kind = "openai"
base_url = "{oai.base_url}/v1"
api_key = "{UPSTREAM_KEY}"

[[providers]]
name = "claude"
kind = "anthropic"
base_url = "{anth.base_url}"
api_key = "{UPSTREAM_KEY}"

[[models]]
name = "gpt"
kinds = ["chat", "completions", "responses", "embeddings", "decisions", "messages", "images", "image_edits",
         "audio_transcriptions", "videos", "realtime"]
[[models.rows]]
provider = "openai"
upstream_model = "gpt-upstream"
[models.prices]
input_per_mtok = 1.0
output_per_mtok = 2.0

[[models]]
name = "claude"
kinds = ["messages", "chat"]
[[models.rows]]
provider = "claude"
upstream_model = "claude-upstream"
[models.prices]
input_per_mtok = 1.0
output_per_mtok = 2.0

[[plans]]
code = "free"
rpm = 0
tpm = 0
"""


def mock_config(path: Path, storage_url: str, redis_url: str | None = None) -> Path:
    """A config at `path` serving the model `gpt` from the built-in mock provider (for gateway processes)."""
    redis = f'[redis]\nurl = "{redis_url}"\n' if redis_url else ""
    path.write_text(f"""
[storage]
url = "{storage_url}"

{redis}
[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "gpt"
kinds = ["chat"]
[[models.rows]]
provider = "mock"

[[plans]]
code = "free"
rpm = 0
tpm = 0
""")
    return path


@dataclass(slots=True)
class Stack:
    """The running gateway, its fakes and one tenant."""

    gateway: ThreadedGateway
    oai: FakeUpstream
    anth: FakeUpstream
    tenant: Tenant

    @property
    def base_url(self) -> str:
        return self.gateway.base_url

    def cabinet(self, method: str, path: str, body: dict | None = None) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.base_url}/api{path}",
            json=body,
            timeout=30,
            headers={"authorization": f"Bearer {self.tenant.session_token}"},
        )

    def rule(self, effect: str, where: str = "prompt", models: list[str] | None = None, **terms) -> dict:
        """Create a content rule of the tenant's organization: `terms` are phrases, patterns, detectors."""
        body = {"subjectType": "organization", "effect": effect, "content": {"where": where, **terms}}
        if models is not None:
            body["models"] = models
        reply = self.cabinet("POST", "/policy-rules", body)
        assert reply.status_code == 201, reply.text
        return reply.json()

    def post(self, path: str, body: dict, **headers: str) -> httpx.Response:
        return httpx.post(
            f"{self.base_url}{path}",
            json=body,
            timeout=30,
            headers={"authorization": f"Bearer {self.tenant.api_key}", **headers},
        )

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.base_url}/v1", api_key=self.tenant.api_key, max_retries=0, timeout=30
        )

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url=self.base_url, api_key=self.tenant.api_key, max_retries=0, timeout=30
        )

    def audit(self, **filters: str) -> list[dict]:
        """The tenant's audit entries of content rules (newest first), with any filters of the API."""
        reply = self.cabinet("GET", "/audit-log?" + "&".join(f"{k}={v}" for k, v in filters.items()))
        assert reply.status_code == 200, reply.text
        return [e for e in reply.json()["entries"] if e["event"].startswith("content_policy.")]

    def ledger_rows(self) -> list[dict]:
        """The tenant's ledger rows (oldest first), read from storage."""

        async def read() -> list[dict]:
            db = await open_database(self.gateway.storage_url)
            try:
                rows = await db.fetch(
                    "SELECT l.request_id, l.status, l.outcome, l.content_action, l.cost_micros,"
                    " l.output_tokens FROM usage_ledger l JOIN api_keys k ON k.id = l.key_id"
                    " WHERE k.id = $1 ORDER BY l.created_at",
                    self.tenant.key_id,
                )
                return [dict(r) for r in rows]
            finally:
                await db.close()

        return asyncio.run(read())


@pytest.fixture(scope="module")
def oai() -> Iterator[FakeUpstream]:
    with FakeUpstream("oai", api_key=UPSTREAM_KEY) as fake:
        yield fake


@pytest.fixture(scope="module")
def anth() -> Iterator[FakeUpstream]:
    with FakeUpstream("anth", api_key=UPSTREAM_KEY) as fake:
        yield fake


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def running(request: pytest.FixtureRequest, tmp_path_factory, oai, anth) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("content")
    if request.param == "sqlite":
        storage_url = f"sqlite:///{workdir / 'gw.db'}"
    else:
        storage_url = request.getfixturevalue("pg_server_url")
    config = write_config(workdir / "modelgate.toml", content_toml(storage_url, oai, anth))
    with ThreadedGateway(config) as gateway:
        yield Stack(gateway, oai, anth, register_tenant(gateway.base_url))


@pytest.fixture
def stack(running: Stack) -> Iterator[Stack]:
    """The module's stack with empty fakes and none of the tenant's rules."""
    running.oai.clear()
    running.anth.clear()
    for rule in running.cabinet("GET", "/policy-rules").json()["policyRules"]:
        running.cabinet("DELETE", f"/policy-rules/{rule['id']}")
    yield running
