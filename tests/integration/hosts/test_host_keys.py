"""Several keys per host, used in turn: a key the provider refuses (401) or throttles (429) rests on its own
while its siblings serve, the request itself retried with a sibling; the log names the serving key by its
fingerprint, never the key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modelgate.proxy.upstream.key_ring import fingerprint
from tests.fakes import FakeUpstream, Fault
from tests.support.gateway import GatewayProcess, register_tenant

GOOD = ("sk-host-good-one-0123456789", "sk-host-good-two-0123456789")
REVOKED = "sk-host-revoked-0123456789"


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream("keys", api_key=GOOD) as upstream:
        yield upstream


def _config(tmp_path: Path, fake: FakeUpstream) -> Path:
    path = tmp_path / "keys.toml"
    path.write_text(f"""
[storage]
url = "sqlite:///{tmp_path / "gw.db"}"

[logging]
json = true

[routing]
failure_threshold = 100

[[providers]]
name = "alpha"
kind = "openai"

[[providers.hosts]]
name = "main"
base_url = "{fake.base_url}/v1"
api_keys = ["{GOOD[0]}", "{REVOKED}", "{GOOD[1]}"]

[[models]]
name = "gpt"
kinds = ["chat"]
[[models.rows]]
provider = "alpha"

[[plans]]
code = "free"
rpm = 0
tpm = 0
""")
    return path


def _chat(base_url: str, api_key: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        timeout=30,
        headers={"authorization": f"Bearer {api_key}"},
        json={"model": "gpt", "messages": [{"role": "user", "content": "hi"}]},
    )


def _keys_used(fake: FakeUpstream) -> list[str]:
    return [
        r.headers["authorization"].removeprefix("Bearer ") for r in fake.requests_to("/v1/chat/completions")
    ]


def test_a_refused_key_rests_while_its_siblings_serve_and_the_log_names_keys_by_fingerprint(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    with GatewayProcess(_config(tmp_path, fake), cwd=tmp_path) as gateway:
        tenant = register_tenant(gateway.base_url)
        statuses = [_chat(gateway.base_url, tenant.api_key).status_code for _ in range(6)]
        used = _keys_used(fake)
        fake.clear()
        # A 429 on the next request: that key rests (retry-after), the request is served by its sibling.
        fake.add_fault("/v1/chat/completions", Fault(status=429, headers={"retry-after": "300"}))
        throttled_round = [_chat(gateway.base_url, tenant.api_key).status_code for _ in range(4)]
        after_throttle = _keys_used(fake)
        output = gateway.output()

    assert statuses == [200] * 6
    assert used.count(REVOKED) == 1  # refused once, then resting: never asked again
    assert used[used.index(REVOKED) + 1] in GOOD  # the refused request went on with a sibling at once
    assert sorted(set(used) - {REVOKED}) == sorted(GOOD)
    assert throttled_round == [200] * 4
    throttled = after_throttle[0]
    assert after_throttle[1:] == [k for k in GOOD if k != throttled] * 4  # the throttled key rests
    assert REVOKED not in output and GOOD[0] not in output and GOOD[1] not in output
    assert fingerprint(GOOD[0]) in output and fingerprint(GOOD[1]) in output
