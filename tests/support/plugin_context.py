"""Realistic request contexts for unit tests of one plugin (the way mitmproxy's addon tests build `tflow()`).

`open_services` builds the plugins' real collaborators from a config written as TOML: route table, model
catalog, a migrated SQLite database with its key and policy directories, in-process counters, the ledger,
the accounts and the object store. `add_key` stores an organization and an API key in it. `request_context`
is a request as the model API receives it; `context_before` is one as the chain hands it to a given plugin,
every earlier phase filled in the way its own plugin fills it. `answered` records what the forwarder does
once a row has answered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.streams import EmptyStreamReader, StreamReader
from aiohttp.test_utils import make_mocked_request

from modelgate.cabinet.organizations import insert_organization
from modelgate.config import Config, load_config
from modelgate.domain.accounts import Accounts
from modelgate.domain.counters import InProcessCounters
from modelgate.domain.ledger import LedgerWriter
from modelgate.domain.money import to_micros
from modelgate.domain.policy_decisions import PolicyDirectory
from modelgate.domain.tokens import hash_token, new_api_key_secret, new_id, secret_hint
from modelgate.plugins import CHAIN_PLUGINS
from modelgate.plugins.output_caps import ensure_estimate
from modelgate.proxy.pipeline.context import AnswerHead, RequestContext
from modelgate.proxy.pipeline.envelopes import Envelope
from modelgate.proxy.pipeline.model_api import request_id_of
from modelgate.proxy.pipeline.route_table import RouteTable
from modelgate.proxy.state.keys import KeyDirectory, KeyRecord
from modelgate.proxy.state.objects import ObjectStore
from modelgate.proxy.upstream.model_rows import ModelCatalog
from modelgate.proxy.upstream.providers import Upstream, build_upstreams
from modelgate.storage import Database, apply_migrations, open_database

# Two providers (one speaks Messages natively), a model on both, one on the non-native provider only, media
# models, and three plans: limited and prepaid, post-paid without limits, and one request a minute.
GATEWAY_TOML = """
[[providers]]
name = "openai"
kind = "openai"
base_url = "http://openai.test/v1"

[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "http://anthropic.test"

[[models]]
name = "gpt-test"
kinds = ["chat", "completions", "responses", "embeddings", "messages", "decisions", "realtime"]
default_max_tokens = 1000
max_context_tokens = 8000
[[models.rows]]
provider = "openai"
upstream_model = "gpt-test-2025"
[[models.rows]]
provider = "anthropic"
upstream_model = "claude-test"
priority = 1
[models.prices]
input_per_mtok = 2.0
output_per_mtok = 10.0

[[models]]
name = "openai-only"
kinds = ["chat", "messages"]
[[models.rows]]
provider = "openai"

[[models]]
name = "video-test"
kinds = ["videos"]
[[models.rows]]
provider = "openai"
[models.prices]
per_video_second = 0.1

[[models]]
name = "image-test"
kinds = ["images", "image_edits"]
[[models.rows]]
provider = "openai"
[models.prices]
per_image = 0.04

[[plans]]
code = "free"
rpm = 60
tpm = 100000
realtime_concurrency = 1

[[plans]]
code = "postpaid"
credit_limit = 100.0
rpm = 0
tpm = 0
realtime_concurrency = 0

[[plans]]
code = "tight"
rpm = 1
tpm = 5000
"""


# The body most tests send: a chat completion on gpt-test with a 100-token cap (never mutated: the context
# parses its own copy).
CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}


@dataclass(slots=True)
class PluginServices:
    """The collaborators the chain's plugins are built from (plugins.ChainServices), for real."""

    config: Config
    routes: RouteTable
    upstreams: dict[str, Upstream]
    catalog: ModelCatalog
    db: Database
    keys: KeyDirectory
    policies: PolicyDirectory
    counters: InProcessCounters
    ledger: LedgerWriter
    accounts: Accounts
    objects: ObjectStore

    async def close(self) -> None:
        await self.objects.drain()
        for upstream in self.upstreams.values():
            await upstream.close()
        await self.db.close()


def gateway_config(tmp_path: Path, toml: str = GATEWAY_TOML) -> Config:
    """The config `toml` describes, read by the real loader (the database is a SQLite file in tmp_path)."""
    path = tmp_path / "modelgate.toml"
    path.write_text(f'[storage]\nurl = "sqlite:///{tmp_path / "modelgate.db"}"\n{toml}')
    return load_config(path, env={})


async def open_services(tmp_path: Path, toml: str = GATEWAY_TOML) -> PluginServices:
    """Every collaborator built from the config, on a migrated SQLite database; the ledger keeps its rows in
    memory (no spool) until `ledger.flush()` writes them."""
    config = gateway_config(tmp_path, toml)
    upstreams = build_upstreams(config.providers)
    db = await open_database(config.storage.url)
    await apply_migrations(db)
    counters = InProcessCounters()
    ledger = LedgerWriter(db, interval=1.0, batch_size=500)
    policies = PolicyDirectory(db)
    return PluginServices(
        config=config,
        routes=RouteTable(),
        upstreams=upstreams,
        catalog=ModelCatalog(config, upstreams),
        db=db,
        keys=KeyDirectory(db),
        policies=policies,
        counters=counters,
        ledger=ledger,
        accounts=Accounts(db, config, counters, ledger, policies, shared=False),
        objects=ObjectStore(db),
    )


@dataclass(frozen=True, slots=True)
class StoredKey:
    """An API key stored for a new organization: the secret a client presents, and its record."""

    secret: str
    record: KeyRecord


async def add_key(
    services: PluginServices,
    *,
    plan: str = "free",
    balance_usd: float = 0.0,
    activated: bool = True,
    system: bool = False,
    organization_id: str | None = None,
) -> StoredKey:
    """An active API key of a new organization on `plan` with `balance_usd` (its first invoice paid when
    `activated`), or of the existing `organization_id`; in a new system of the organization when `system`."""
    at = time.time()
    secret = new_api_key_secret()
    async with services.db.transaction() as tx:
        if organization_id is None:
            organization_id = (await insert_organization(tx, "Test Org", plan, at)).id
            await tx.execute(
                "UPDATE organizations SET balance_micros = $1, activated_at = $2 WHERE id = $3",
                to_micros(balance_usd),
                at if activated else None,
                organization_id,
            )
        system_id = None
        if system:
            system_id = new_id("sys")
            await tx.execute(
                "INSERT INTO systems (id, organization_id, name, created_at) VALUES ($1, $2, $3, $4)",
                system_id,
                organization_id,
                f"system {system_id}",
                at,
            )
        await tx.execute(
            "INSERT INTO api_keys (id, organization_id, alias, owner_email, system_id, status, secret_hash,"
            " secret_hint, created_at) VALUES ($1, $2, $3, $4, $5, 'active', $6, $7, $8)",
            new_id("key"),
            organization_id,
            f"key {secret_hint(secret)}",
            "owner@example.com",
            system_id,
            hash_token(secret),
            secret_hint(secret),
            at,
        )
    record = await services.keys.lookup(secret)
    assert record is not None
    return StoredKey(secret, record)


async def add_policy_rule(
    services: PluginServices,
    key: KeyRecord,
    *,
    effect: str = "allow",
    models: tuple[str, ...] = ("*",),
    subject: str = "organization",
    budget_usd: float | None = None,
    budget_period: str | None = None,
    rpm: int | None = None,
    tpm: int | None = None,
) -> str:
    """A policy rule of the key's organization on `subject` ("organization", "key" or "system"), stored as
    the cabinet stores it; the policy directory reads it on the organization's next request."""
    subject_id = {"organization": key.organization_id, "key": key.id, "system": key.system_id}[subject]
    rule_id = new_id("pol")
    at = time.time()
    await services.db.execute(
        "INSERT INTO policy_rules (id, organization_id, subject_type, subject_id, effect, models,"
        " budget_micros, budget_period, rpm, tpm, created_at, updated_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        rule_id,
        key.organization_id,
        subject,
        subject_id,
        effect,
        orjson.dumps(list(models)).decode(),
        to_micros(budget_usd) if budget_usd is not None else None,
        budget_period,
        rpm,
        tpm,
        at,
        at,
    )
    services.policies.invalidate(key.organization_id)
    return rule_id


def mocked_request(
    method: str = "POST",
    path: str = "/v1/chat/completions",
    *,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
) -> web.Request:
    """A real aiohttp request whose body stream holds `body`, all of it received; a Content-Length is
    declared unless the headers say the body is chunked."""
    headers = dict(headers or {})
    if body and "transfer-encoding" not in {name.lower() for name in headers}:
        headers.setdefault("Content-Length", str(len(body)))
    payload: Any = EmptyStreamReader()
    if body or headers.get("Content-Length") == "0":
        loop = asyncio.get_running_loop()
        payload = StreamReader(BaseProtocol(loop), max(len(body), 2**16), loop=loop)  # all buffered
        payload.feed_data(body)
        payload.feed_eof()
    return make_mocked_request(method, path, headers=headers, payload=payload)


def request_context(
    method: str = "POST",
    path: str = "/v1/chat/completions",
    *,
    headers: dict[str, str] | None = None,
    body: bytes | dict | None = None,
) -> RequestContext:
    """The context the model API makes before the first plugin: the request (a dict body is sent as JSON),
    its id (the client's valid `x-request-id`, else a new one) and its start time."""
    headers = dict(headers or {})
    if isinstance(body, dict):
        headers.setdefault("Content-Type", "application/json")
        body = orjson.dumps(body)
    request = mocked_request(method, path, headers=headers, body=body or b"")
    return RequestContext(request, request_id_of(request), time.perf_counter())


_CHAIN_ORDER = [plugin.name for plugin in CHAIN_PLUGINS]


async def context_before(
    plugin: str,
    services: PluginServices,
    *,
    method: str = "POST",
    path: str = "/v1/chat/completions",
    payload: dict | None = None,
    body: bytes | None = None,
    key: KeyRecord | None = None,
    headers: dict[str, str] | None = None,
) -> RequestContext:
    """The context of a request with a JSON `payload` (or a raw `body`) as the chain hands it to `plugin`
    (a chain plugin's name). What the earlier plugins record is filled in the way they record it: the
    route, object id and envelope (route_support), the key (auth), the body and its parsed payload
    (body_limits), `stream` (request_validation), the model and its rows (model_routing), the policy and
    decision (policy), the token estimate and the filled-in output cap (output_caps). The other steps
    (request ids, provider filter, admission, ...) record nothing unless the request asks for them; a test
    that needs their work runs those plugins."""
    done = set(_CHAIN_ORDER[: _CHAIN_ORDER.index(plugin)])
    ctx = request_context(method, path, headers=headers, body=payload if payload is not None else body)
    if "route_support" in done:
        ctx.route, ctx.object_id = services.routes.match(method, ctx.request.path)
        assert ctx.route is not None, f"{method} {path} is not a model API route"
        if ctx.route.envelope is Envelope.B or (
            ctx.route.envelope_b_with_version_header and "anthropic-version" in ctx.request.headers
        ):
            ctx.envelope = Envelope.B
    if "auth" in done:
        ctx.key = key
    if "body_limits" in done and payload is not None:
        ctx.body = await ctx.request.read()
        ctx.payload = orjson.loads(ctx.body)
    if "request_validation" in done and ctx.payload is not None:
        ctx.stream = ctx.payload.get("stream") is True
    route = ctx.route
    if "model_routing" in done and route.kind is not None and not route.has_id:
        ctx.model = services.catalog.get(ctx.payload["model"])
        assert ctx.model is not None and route.kind in ctx.model.kinds, "a model serving this route"
        ctx.rows = list(ctx.model.rows)
    if "policy" in done and key is not None:
        ctx.policy = await services.policies.policy(key.organization_id)
        if ctx.model is not None:
            ctx.decision = ctx.policy.decide(key.id, key.system_id, ctx.model.name)
    if "output_caps" in done:
        ensure_estimate(ctx)
    return ctx


async def run_hook(result: Awaitable[None] | None) -> None:
    """Await what a request or completion hook returned, as the chain does: a hook that did not need to wait
    returned None."""
    if result is not None:
        await result


def answer_head(
    ctx: RequestContext, *, status: int = 200, content_type: str = "application/json", streamed: bool = False
) -> AnswerHead:
    """The answer's head as the forwarder hands it to the response phase (`ctx.answer`), no translator."""
    ctx.answer = AnswerHead(status, ctx.response_headers, {"content-type": content_type}, streamed)
    return ctx.answer


def answered(ctx: RequestContext, *, status: int = 200, body: bytes = b"", row_index: int = 0) -> None:
    """What the forwarder records when a row answered a whole body: the row and status (one attempt), and
    for a success the answer's head, the answered status, the bytes sent, the first byte's time and the
    outcome "completed"."""
    ctx.row = ctx.rows[row_index]
    ctx.status = status
    ctx.attempts += 1
    if status < 400:
        if ctx.answer is None:
            answer_head(ctx, status=status)
        ctx.answered_status = status
        ctx.bytes_sent = len(body)
        ctx.first_byte_at = time.perf_counter()
        ctx.outcome = "completed"
