"""No secret reaches the logs: passwords, session tokens, API keys, management keys and invitation tokens
are never written, even at debug level, while a real gateway process serves every flow that carries them;
nor are API keys, realtime client secrets, prompts or OIDC client secrets when requests are malformed HTTP or
a library logs its arguments at debug level."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import aiohttp
import httpx
import openai

from tests.integration.edge.malformed_requests import malformed_requests
from tests.support.gateway import GatewayProcess, free_port, register_tenant, revoke_key
from tests.support.mail_links import link_token_from_cli
from tests.support.raw_http import RawAnswer, exchange

PASSWORD = "correct horse battery"


def _config(tmp_path: Path, storage_url: str | None = None, extra: str = "") -> Path:
    """Debug logging and a mock chat model (SQLite in tmp_path unless `storage_url`), plus `extra` TOML."""
    path = tmp_path / "debug.toml"
    path.write_text(f"""
[logging]
level = "debug"
json = true

[storage]
url = "{storage_url or f"sqlite:///{tmp_path / 'secrets.db'}"}"

[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "mock-chat"
kinds = ["chat"]
[[models.rows]]
provider = "mock"

[[plans]]
code = "free"
{extra}
""")
    return path


def test_no_secret_is_logged_across_the_cabinet_and_model_api(tmp_path: Path) -> None:
    config_path = _config(tmp_path)
    gateway = GatewayProcess(config_path, cwd=tmp_path).start()
    try:
        base = gateway.base_url
        tenant = register_tenant(base, email="owner@secrets.example")
        auth = {"authorization": f"Bearer {tenant.session_token}"}
        secrets = [PASSWORD, tenant.session_token, tenant.api_key]
        with httpx.Client(base_url=base, timeout=30) as client:
            login = client.post("/api/auth/login", json={"email": tenant.email, "password": PASSWORD})
            secrets.append(login.json()["token"])
            assert (
                client.post(
                    "/api/auth/login", json={"email": tenant.email, "password": "wrong-" + PASSWORD}
                ).status_code
                == 401
            )
            management = client.post("/api/organization/management-keys", json={"name": "ops"}, headers=auth)
            secrets.append(management.json()["secret"])
            invitation = client.post(
                "/api/invitations", json={"email": "new@secrets.example", "role": "member"}, headers=auth
            ).json()
            assert "token" not in invitation  # it goes to the address (here: the operator), not the inviter
            invite_token = link_token_from_cli(config_path, "new@secrets.example", "invitation", tmp_path)
            secrets.append(invite_token)
            accepted = client.post(
                "/api/invitations/accept", json={"token": invite_token, "password": "another long password"}
            )
            secrets += ["another long password", accepted.json()["token"]]
            chat = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}
            assert (
                client.post(
                    "/v1/chat/completions", json=chat, headers={"authorization": f"Bearer {tenant.api_key}"}
                ).status_code
                == 200
            )
            assert (
                client.post(
                    "/v1/chat/completions", json=chat, headers={"authorization": f"Bearer {tenant.api_key}x"}
                ).status_code
                == 401
            )
        assert revoke_key(base, tenant).status_code == 200
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
    output = gateway.output()
    assert "modelgate.access" in output  # the logs were there to be read
    leaked = [s for s in secrets if s in output]
    assert leaked == []


def _realtime_nowhere() -> str:
    """A realtime model whose upstream is a closed port: minting a client secret is local, a connect with it
    fails upstream."""
    return f"""
[[providers]]
name = "nowhere"
kind = "openai"
base_url = "http://127.0.0.1:{free_port()}/v1"
api_key = "upstream-key-{os.urandom(8).hex()}"
connect_timeout = 1.0

[[models]]
name = "realtime"
kinds = ["realtime"]
[[models.rows]]
provider = "nowhere"
upstream_model = "gpt-realtime"
"""


async def _realtime_connect(base_url: str, api_key: str, client_secret: str) -> None:
    url = f"{base_url}/v1/realtime?model=realtime&client_secret={client_secret}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        with contextlib.suppress(aiohttp.ClientError):
            async with session.ws_connect(url, headers={"authorization": f"Bearer {api_key}"}):
                pass


def test_malformed_requests_and_debug_logging_leak_no_secret_and_no_traceback(
    tmp_path: Path, storage_url: str
) -> None:
    gateway = GatewayProcess(_config(tmp_path, storage_url, _realtime_nowhere()), cwd=tmp_path).start()
    prompt = "PROMPT-MARKER-" + os.urandom(8).hex() + " " + "lorem ipsum " * 8533  # 100 KB
    oidc_secret = "oidc-client-secret-" + os.urandom(12).hex()
    answers: dict[str, tuple[RawAnswer | None, float | None]] = {}
    try:
        base = gateway.base_url
        tenant = register_tenant(base, email="owner@edge-secrets.example")
        auth = {"authorization": f"Bearer {tenant.api_key}"}
        with httpx.Client(base_url=base, timeout=30) as client:
            minted = client.post("/v1/realtime/client_secrets", json={"model": "realtime"}, headers=auth)
            assert minted.status_code == 200, minted.text
            client_secret = minted.json()["value"]
            provider = client.post(
                "/api/auth/oidc/providers",
                json={
                    "name": "Example SSO",
                    "issuer": "https://login.example.com/tenant",
                    "clientId": "gateway-client",
                    "clientSecret": oidc_secret,
                    "allowedDomains": ["example.com"],
                },
                headers={"authorization": f"Bearer {tenant.session_token}"},
            )
            assert provider.status_code == 201, provider.text
        sdk = openai.OpenAI(base_url=f"{base}/v1", api_key=tenant.api_key, max_retries=0)
        assert sdk.chat.completions.create(model="mock-chat", messages=[{"role": "user", "content": prompt}])
        asyncio.run(_realtime_connect(base, tenant.api_key, client_secret))
        battery = malformed_requests(tenant.api_key, client_secret, prompt)
        for name, (request, _status) in battery.items():
            try:
                answers[name] = exchange(gateway.port, request, within=10)
            except AssertionError:  # no HTTP answer at all: acceptable only as a clean close
                answers[name] = (None, None)
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
        gateway.kill()
    output = gateway.output()

    secrets = {
        "API key": tenant.api_key,
        "realtime client secret": client_secret,
        "prompt": prompt[:30],
        "OIDC client secret": oidc_secret,
    }
    assert [what for what, secret in secrets.items() if secret in output] == []
    assert "Traceback" not in output
    # The logs were there to be read: one line per malformed request, one per model API request.
    assert '"logger":"modelgate.http"' in output and '"logger":"modelgate.access"' in output
    for name, (_request, status) in battery.items():
        answer, closed_after = answers[name]
        assert answer is not None and closed_after is not None, name
        assert answer.status == status, name
        assert set(answer.json()) == {"error"} and answer.json()["error"]["type"] == "invalid_request_error"
