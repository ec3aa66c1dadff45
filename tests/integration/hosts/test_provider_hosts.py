"""One provider served from three hosts at three URLs (real fakes, each checking its own key): the request's
`provider.host` reaches that host's fake and only it; a row per host without one; a throttled host fails
over to another host of the same provider before the first byte; a host may speak another dialect."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest

from tests.fakes import FakeUpstream, Fault
from tests.support.gateway import Tenant, ThreadedGateway, register_tenant, write_config

KEYS = {"eu": "eu-host-key", "us": "us-host-key", "claude": "claude-host-key"}


def hosts_toml(storage_url: str, fakes: dict[str, FakeUpstream]) -> str:
    return f"""
[storage]
url = "{storage_url}"

[routing]
failure_threshold = 100

[[providers]]
name = "alpha"
kind = "openai"
api_key = "{KEYS["eu"]}"

[[providers.hosts]]
name = "eu"
base_url = "{fakes["eu"].base_url}/v1"

[[providers.hosts]]
name = "us"
base_url = "{fakes["us"].base_url.replace("127.0.0.1", "localhost")}/v1"
api_key = "{KEYS["us"]}"

[[providers.hosts]]
name = "claude"
base_url = "{fakes["claude"].base_url}"
dialect = "anthropic"
api_key = "{KEYS["claude"]}"

[[models]]
name = "gpt"
kinds = ["chat"]
[[models.rows]]
provider = "alpha"
host = "eu"
[[models.rows]]
provider = "alpha"
host = "us"
priority = 1

[[models]]
name = "everywhere"
kinds = ["chat", "messages"]
[[models.rows]]
provider = "alpha"

[[plans]]
code = "free"
rpm = 0
tpm = 0
"""


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FakeUpstream]]:
    with (
        FakeUpstream("eu", api_key=KEYS["eu"]) as eu,
        FakeUpstream("us", api_key=KEYS["us"]) as us,
        FakeUpstream("claude", api_key=KEYS["claude"]) as claude,
    ):
        yield {"eu": eu, "us": us, "claude": claude}


@pytest.fixture(scope="module")
def running(tmp_path_factory, fakes) -> Iterator[tuple[ThreadedGateway, Tenant]]:
    workdir = tmp_path_factory.mktemp("hosts")
    config = write_config(workdir / "hosts.toml", hosts_toml(f"sqlite:///{workdir / 'gw.db'}", fakes))
    with ThreadedGateway(config) as gateway:
        yield gateway, register_tenant(gateway.base_url)


@pytest.fixture
def client(running, fakes) -> Iterator[openai.OpenAI]:
    for fake in fakes.values():
        fake.clear()
        fake.clear_faults()
    gateway, tenant = running
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0) as sdk:
        yield sdk


def _served_by(fakes: dict[str, FakeUpstream]) -> dict[str, int]:
    return {name: len(fake.requests) for name, fake in fakes.items() if fake.requests}


def _chat(client: openai.OpenAI, model: str, **provider: object):
    extra = {"provider": provider} if provider else None
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello"}], extra_body=extra
    )


@pytest.mark.parametrize("host", ["eu", "us", "claude"])
def test_provider_host_reaches_that_hosts_fake_and_only_it(client, fakes, host: str) -> None:
    answer = _chat(client, "everywhere", host=host)
    assert answer.choices[0].message.content == "echo: hello"
    assert _served_by(fakes) == {host: 1}


def test_provider_only_with_a_host_and_without_one(client, fakes) -> None:
    _chat(client, "gpt", only=["alpha"], host="us")
    assert _served_by(fakes) == {"us": 1}
    for fake in fakes.values():
        fake.clear()
    for _ in range(3):
        _chat(client, "gpt", only="alpha")
    assert _served_by(fakes) == {"eu": 3}  # the first row's host, without a host asked


def test_a_host_not_serving_the_model_is_a_400(client) -> None:
    with pytest.raises(openai.BadRequestError):
        _chat(client, "gpt", host="claude")


def test_a_throttled_host_fails_over_to_another_host_of_the_provider(client, fakes) -> None:
    fakes["eu"].add_fault("/v1/chat/completions", Fault(status=429), times=3)
    for _ in range(3):  # eu is the first row: throttled, each request moves on to us before its first byte
        assert _chat(client, "gpt").choices[0].message.content == "echo: hello"
    assert _served_by(fakes) == {"eu": 3, "us": 3}
    fakes["us"].add_fault("/v1/chat/completions", Fault(status=429))
    fakes["eu"].add_fault("/v1/chat/completions", Fault(status=429))
    with pytest.raises(openai.APIStatusError) as caught:
        _chat(client, "gpt")  # every host throttled: nothing left to try
    assert caught.value.status_code in (502, 503)


def test_messages_on_an_anthropic_dialect_host_are_native(running, fakes) -> None:
    for fake in fakes.values():
        fake.clear()
    gateway, tenant = running
    with anthropic.Anthropic(base_url=gateway.base_url, api_key=tenant.api_key, max_retries=0) as sdk:
        message = sdk.messages.create(
            model="everywhere",
            max_tokens=20,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"provider": {"host": "claude"}},
        )
    assert message.content[0].text == "echo: hi"
    [sent] = fakes["claude"].requests
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == KEYS["claude"]
