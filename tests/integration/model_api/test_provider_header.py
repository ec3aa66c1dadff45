"""Which provider serves a model is the operator's business: answers name it only when
`server.expose_provider_header` says so (issue 33, finding 6)."""

from __future__ import annotations

import httpx

from tests.integration.model_api.conftest import gateway_toml
from tests.support.gateway import ThreadedGateway, register_tenant, write_config

CHAT = "/v1/chat/completions"
BODY = {"model": "gpt-test", "messages": [{"role": "user", "content": "who serves me"}]}


def test_answers_do_not_name_the_provider_by_default(http) -> None:
    plain = http.post(CHAT, json=BODY)
    with http.stream("POST", CHAT, json={**BODY, "stream": True}) as streamed:
        streamed.read()

    assert (plain.status_code, streamed.status_code) == (200, 200)
    assert "x-modelgate-provider" not in plain.headers
    assert "x-modelgate-provider" not in streamed.headers
    assert "alpha" not in str(plain.headers).lower()


def test_the_operator_can_turn_the_provider_header_on(tmp_path, upstreams) -> None:
    toml = gateway_toml(
        f"sqlite:///{tmp_path / 'gw.db'}", *upstreams, extra="[server]\nexpose_provider_header = true\n"
    )
    with ThreadedGateway(write_config(tmp_path / "modelgate.toml", toml)) as gateway:
        key = register_tenant(gateway.base_url).api_key

        with httpx.Client(base_url=gateway.base_url, headers={"authorization": f"Bearer {key}"}) as http:
            reply = http.post(CHAT, json=BODY)

    assert reply.status_code == 200
    assert reply.headers["x-modelgate-provider"] == "alpha"
