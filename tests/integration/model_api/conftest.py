"""Fixtures for the model API: real fake upstreams, the real gateway on loopback, a registered tenant."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes import FakeUpstream
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config

UPSTREAM_KEY = "upstream-secret-key"


def gateway_toml(
    storage_url: str,
    primary: FakeUpstream,
    secondary: FakeUpstream,
    anthropic: FakeUpstream,
    *,
    extra: str = "",
    timeout: float = 3.0,
    cooldown_seconds: float = 30.0,
    alpha_options: str = "",
) -> str:
    """Two OpenAI-kind providers on distinct hosts (127.0.0.1 / localhost), one Anthropic-kind, and mock.

    `timeout` is the first-byte and read timeout of the OpenAI-kind providers; `alpha_options` are more
    keys of provider alpha (e.g. its pool_size).
    """
    return f"""
[storage]
url = "{storage_url}"

[routing]
cooldown_seconds = {cooldown_seconds}
failure_threshold = 2

[[providers]]
name = "alpha"
kind = "openai"
base_url = "{primary.base_url}/v1"
api_key = "{UPSTREAM_KEY}"
connect_timeout = 2.0
first_byte_timeout = {timeout}
read_timeout = {timeout}
{alpha_options}

[[providers]]
name = "beta"
kind = "openai"
base_url = "{secondary.base_url.replace("127.0.0.1", "localhost")}/v1"
api_key = "{UPSTREAM_KEY}"
connect_timeout = 2.0
first_byte_timeout = {timeout}
read_timeout = {timeout}

[[providers]]
name = "claude"
kind = "anthropic"
base_url = "{anthropic.base_url}"
api_key = "{UPSTREAM_KEY}"

[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "gpt-test"
kinds = ["chat", "completions", "responses"]
[[models.rows]]
provider = "alpha"
upstream_model = "gpt-upstream-a"
priority = 0
[[models.rows]]
provider = "beta"
upstream_model = "gpt-upstream-b"
priority = 1

[[models]]
name = "balanced"
kinds = ["chat"]
[[models.rows]]
provider = "alpha"
weight = 1.0
[[models.rows]]
provider = "beta"
weight = 1.0

[[models]]
name = "embed-test"
kinds = ["embeddings"]
[[models.rows]]
provider = "alpha"

[[models]]
name = "decider"
kinds = ["decisions"]
[[models.rows]]
provider = "alpha"

[[models]]
name = "claude-test"
kinds = ["messages"]
[[models.rows]]
provider = "claude"
upstream_model = "claude-upstream"

[[models]]
name = "mock-chat"
kinds = ["chat", "completions", "embeddings", "responses", "decisions"]
[[models.rows]]
provider = "mock"

[[plans]]
code = "free"
rpm = 0
tpm = 0
{extra}
"""


SHARED_GATEWAY = "shared_gateway"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{SHARED_GATEWAY}: the module's tests share one gateway, fakes and tenant (the fakes are wiped "
        "before each test); only for tests that leave no state in the gateway (no row failures, "
        "no revocations)",
    )


def _shares_gateway(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker(SHARED_GATEWAY) is not None


def _start_fakes(stack: ExitStack) -> tuple[FakeUpstream, FakeUpstream, FakeUpstream]:
    return tuple(
        stack.enter_context(FakeUpstream(name, api_key=UPSTREAM_KEY)) for name in ("alpha", "beta", "claude")
    )


@dataclass(frozen=True, slots=True)
class SharedStack:
    upstreams: tuple[FakeUpstream, FakeUpstream, FakeUpstream]
    gateway: ThreadedGateway
    tenant: Tenant


@pytest.fixture(scope="module")
def shared_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedStack]:
    """One gateway on its own fakes with one tenant, for a module marked `shared_gateway`."""
    directory = tmp_path_factory.mktemp("shared-gateway")
    with ExitStack() as stack:
        fakes = _start_fakes(stack)
        config = write_config(
            directory / "modelgate.toml", gateway_toml(f"sqlite:///{directory / 'gw.db'}", *fakes)
        )
        running = stack.enter_context(ThreadedGateway(config))
        yield SharedStack(fakes, running, register_tenant(running.base_url))


MEDIA_MODELS = """
[[models]]
name = "image-edit-test"
kinds = ["image_edits"]
[[models.rows]]
provider = "alpha"

[[models]]
name = "audio-test"
kinds = ["audio_transcriptions", "audio_translations"]
[[models.rows]]
provider = "alpha"

[[models]]
name = "video-test"
kinds = ["videos"]
[[models.rows]]
provider = "alpha"
"""


@pytest.fixture(scope="module")
def media_http(shared_stack, tmp_path_factory) -> Iterator[httpx.Client]:
    """Raw HTTP to a second gateway on the shared fakes whose models serve the multipart routes."""
    directory = tmp_path_factory.mktemp("media-limits")
    toml = gateway_toml(f"sqlite:///{directory / 'gw.db'}", *shared_stack.upstreams, extra=MEDIA_MODELS)
    with ThreadedGateway(write_config(directory / "modelgate.toml", toml)) as running:
        key = register_tenant(running.base_url).api_key
        with httpx.Client(
            base_url=running.base_url, timeout=60, headers={"authorization": f"Bearer {key}"}
        ) as raw:
            yield raw


@pytest.fixture
def upstreams(request: pytest.FixtureRequest) -> Iterator[tuple[FakeUpstream, FakeUpstream, FakeUpstream]]:
    if _shares_gateway(request):
        fakes = request.getfixturevalue("shared_stack").upstreams
        for fake in fakes:
            fake.clear_faults()
            fake.clear()
        yield fakes
        return
    with ExitStack() as stack:
        yield _start_fakes(stack)


@pytest.fixture
def alpha(upstreams) -> FakeUpstream:
    return upstreams[0]


@pytest.fixture
def beta(upstreams) -> FakeUpstream:
    return upstreams[1]


@pytest.fixture
def claude(upstreams) -> FakeUpstream:
    return upstreams[2]


@pytest.fixture
def gateway(request: pytest.FixtureRequest, tmp_path: Path, upstreams) -> Iterator[ThreadedGateway]:
    if _shares_gateway(request):
        yield request.getfixturevalue("shared_stack").gateway
        return
    config = write_config(
        tmp_path / "modelgate.toml", gateway_toml(f"sqlite:///{tmp_path / 'gw.db'}", *upstreams)
    )
    with ThreadedGateway(config) as running:
        yield running


@pytest.fixture
def tenant(request: pytest.FixtureRequest, gateway: ThreadedGateway) -> Tenant:
    if _shares_gateway(request):
        return request.getfixturevalue("shared_stack").tenant
    return register_tenant(gateway.base_url)


@pytest.fixture
def gateway_with(tmp_path: Path, upstreams) -> Iterator[Callable[..., ThreadedGateway]]:
    """Start a gateway on the same fakes with `gateway_toml` options changed (timeouts, cool-down, extra)."""
    running: list[ThreadedGateway] = []

    def start(**options) -> ThreadedGateway:
        index = len(running)
        toml = gateway_toml(f"sqlite:///{tmp_path / f'gw-{index}.db'}", *upstreams, **options)
        started = ThreadedGateway(write_config(tmp_path / f"modelgate-{index}.toml", toml)).start()
        running.append(started)
        return started

    yield start
    for started in running:
        started.stop()


@pytest.fixture
def other_tenant(gateway: ThreadedGateway) -> Tenant:
    """A second organization on the same gateway."""
    return register_tenant(gateway.base_url)


@pytest.fixture
def client(gateway: ThreadedGateway, tenant: Tenant) -> Iterator[openai.OpenAI]:
    """The official openai SDK pointed at the gateway with the tenant's key; no retries."""
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0) as sdk:
        yield sdk


@pytest.fixture
def http(gateway: ThreadedGateway, tenant: Tenant) -> Iterator[httpx.Client]:
    """Raw HTTP to the gateway with the tenant's key as a Bearer token."""
    with httpx.Client(
        base_url=gateway.base_url, timeout=30, headers={"authorization": f"Bearer {tenant.api_key}"}
    ) as raw:
        yield raw


@pytest.fixture
def other_http(gateway: ThreadedGateway, other_tenant: Tenant) -> Iterator[httpx.Client]:
    """Raw HTTP to the gateway as the second organization."""
    with httpx.Client(
        base_url=gateway.base_url, timeout=30, headers={"authorization": f"Bearer {other_tenant.api_key}"}
    ) as raw:
        yield raw


@pytest.fixture
def tenant_on() -> Iterator[Callable[[ThreadedGateway], httpx.Client]]:
    """Register a tenant on another gateway (see `gateway_with`) and give raw HTTP with its key."""
    opened: list[httpx.Client] = []

    def open_for(running: ThreadedGateway) -> httpx.Client:
        key = register_tenant(running.base_url).api_key
        opened.append(
            httpx.Client(base_url=running.base_url, timeout=30, headers={"authorization": f"Bearer {key}"})
        )
        return opened[-1]

    yield open_for
    for raw in opened:
        raw.close()
