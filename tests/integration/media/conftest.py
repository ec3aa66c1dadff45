"""Images, audio and videos through the real gateway to real fake upstreams, with lazily generated bodies.

One gateway, its fakes and two tenants serve each test module (the fakes are wiped before every test);
tests that change gateway state start their own with `media_gateway`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from modelgate.storage import open_database
from tests.fakes import FakeUpstream
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config

UPSTREAM_KEY = "upstream-media-key"
MiB = 1024 * 1024
BLOCK = b"\x00\x01\x02\x03" * (MiB // 4)
BOUNDARY = "media-test-boundary"
MULTIPART = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}

PER_IMAGE_USD = 0.04
PER_AUDIO_SECOND_USD = 0.0001
TTS_PER_REQUEST_USD = 0.015
PER_VIDEO_SECOND_USD = 0.1


def media_toml(storage_url: str, alpha: FakeUpstream, beta: FakeUpstream, *, extra: str = "") -> str:
    """Two OpenAI-kind providers on the fakes; a model per media kind; `video-failover` prefers beta."""
    return f"""
[storage]
url = "{storage_url}"

[billing]
ledger_flush_interval_seconds = 0.1

[routing]
failure_threshold = 100

[[providers]]
name = "alpha"
kind = "openai"
base_url = "{alpha.base_url}/v1"
api_key = "{UPSTREAM_KEY}"
first_byte_timeout = 10.0
read_timeout = 10.0

[[providers]]
name = "beta"
kind = "openai"
base_url = "{beta.base_url.replace("127.0.0.1", "localhost")}/v1"
api_key = "{UPSTREAM_KEY}"

[[models]]
name = "image-test"
kinds = ["images", "image_edits"]
[[models.rows]]
provider = "alpha"
upstream_model = "gpt-image-upstream"
[models.prices]
per_image = {PER_IMAGE_USD}

[[models]]
name = "whisper-test"
kinds = ["audio_transcriptions", "audio_translations"]
[[models.rows]]
provider = "alpha"
upstream_model = "whisper-upstream"
[models.prices]
per_audio_second = {PER_AUDIO_SECOND_USD}

[[models]]
name = "tts-test"
kinds = ["audio_speech"]
[[models.rows]]
provider = "alpha"
upstream_model = "tts-upstream"
[models.prices]
per_request = {TTS_PER_REQUEST_USD}

[[models]]
name = "video-test"
kinds = ["videos"]
[[models.rows]]
provider = "alpha"
upstream_model = "sora-upstream"
[models.prices]
per_video_second = {PER_VIDEO_SECOND_USD}

[[models]]
name = "video-failover"
kinds = ["videos", "image_edits"]
[[models.rows]]
provider = "beta"
upstream_model = "sora-beta"
priority = 0
[[models.rows]]
provider = "alpha"
upstream_model = "sora-alpha"
priority = 1

[[plans]]
code = "free"
rpm = 0
tpm = 0
{extra}
"""


# -- lazily generated bodies ---------------------------------------------------------------------------


def filler(size: int) -> Iterator[bytes]:
    """`size` bytes in 1 MiB blocks, generated as they are sent."""
    whole, rest = divmod(size, MiB)
    for _ in range(whole):
        yield BLOCK
    if rest:
        yield BLOCK[:rest]


def field_part(name: str, value: str) -> bytes:
    return f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()


def file_head(name: str, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"; filename="{filename or name + ".bin"}"'
    head = f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n"
    return (head + "Content-Type: application/octet-stream\r\n\r\n").encode()


CLOSING = f"--{BOUNDARY}--\r\n".encode()


def multipart(
    fields: list[tuple[str, str]], files: list[tuple[str, int]], *, fields_after: list[tuple[str, str]] = ()
) -> tuple[int, Iterator[bytes]]:
    """(size, chunks) of a multipart body: text `fields`, file parts of the given sizes, more fields."""
    heads = [field_part(n, v) for n, v in fields]
    tails = [field_part(n, v) for n, v in fields_after]
    total = sum(map(len, heads)) + sum(len(file_head(n)) + size + 2 for n, size in files)
    total += sum(map(len, tails)) + len(CLOSING)

    def chunks() -> Iterator[bytes]:
        yield from heads
        for name, size in files:
            yield file_head(name)
            yield from filler(size)
            yield b"\r\n"
        yield from tails
        yield CLOSING

    return total, chunks()


# -- the stack -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MediaStack:
    alpha: FakeUpstream
    beta: FakeUpstream
    gateway: ThreadedGateway
    tenant: Tenant
    other: Tenant


@pytest.fixture(scope="module")
def media_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MediaStack]:
    directory = tmp_path_factory.mktemp("media")
    with ExitStack() as stack:
        alpha = stack.enter_context(FakeUpstream("alpha", api_key=UPSTREAM_KEY))
        beta = stack.enter_context(FakeUpstream("beta", api_key=UPSTREAM_KEY))
        config = write_config(
            directory / "media.toml", media_toml(f"sqlite:///{directory / 'media.db'}", alpha, beta)
        )
        running = stack.enter_context(ThreadedGateway(config))
        yield MediaStack(
            alpha, beta, running, register_tenant(running.base_url), register_tenant(running.base_url)
        )


@pytest.fixture
def stack(media_stack: MediaStack) -> MediaStack:
    for fake in (media_stack.alpha, media_stack.beta):
        fake.clear_faults()
        fake.clear()
    return media_stack


@pytest.fixture
def alpha(stack: MediaStack) -> FakeUpstream:
    return stack.alpha


@pytest.fixture
def beta(stack: MediaStack) -> FakeUpstream:
    return stack.beta


@pytest.fixture
def client(stack: MediaStack) -> Iterator[openai.OpenAI]:
    """The official openai SDK on the gateway with the first tenant's key; no retries."""
    with openai.OpenAI(
        base_url=f"{stack.gateway.base_url}/v1", api_key=stack.tenant.api_key, max_retries=0
    ) as sdk:
        yield sdk


def _raw(stack: MediaStack, tenant: Tenant) -> httpx.Client:
    return httpx.Client(
        base_url=stack.gateway.base_url, timeout=60, headers={"authorization": f"Bearer {tenant.api_key}"}
    )


@pytest.fixture
def http(stack: MediaStack) -> Iterator[httpx.Client]:
    with _raw(stack, stack.tenant) as raw:
        yield raw


@pytest.fixture
def other_http(stack: MediaStack) -> Iterator[httpx.Client]:
    """Raw HTTP as the second organization."""
    with _raw(stack, stack.other) as raw:
        yield raw


@pytest.fixture
def media_gateway(tmp_path: Path, stack: MediaStack) -> Iterator[Callable[..., ThreadedGateway]]:
    """A gateway of its own on the module's fakes (for tests that change its state)."""
    running: list[ThreadedGateway] = []

    def start(extra: str = "", storage_url: str | None = None) -> ThreadedGateway:
        index = len(running)
        storage_url = storage_url or f"sqlite:///{tmp_path / f'own-{index}.db'}"
        toml = media_toml(storage_url, stack.alpha, stack.beta, extra=extra)
        running.append(ThreadedGateway(write_config(tmp_path / f"own-{index}.toml", toml)).start())
        return running[-1]

    yield start
    for gateway in running:
        gateway.stop()


# -- the ledger ----------------------------------------------------------------------------------------


def ledger_row(storage_url: str, request_id: str, timeout: float = 10.0) -> dict:
    """The ledger row of one request, once the gateway has flushed it (bounded wait)."""

    async def fetch() -> dict | None:
        db = await open_database(storage_url)
        try:
            return await db.fetchrow(
                "SELECT model, status, units, cost_micros, input_tokens, output_tokens, usage_estimated"
                " FROM usage_ledger WHERE request_id = $1",
                request_id,
            )
        finally:
            await db.close()

    deadline = time.monotonic() + timeout
    while True:
        row = asyncio.run(fetch())
        if row is not None or time.monotonic() > deadline:
            assert row is not None, f"no ledger row for {request_id}"
            return dict(row)
        time.sleep(0.05)  # the ledger flushes every 0.1 s; bounded by the deadline
