"""No secret reaches the logs: passwords, session tokens, API keys, management keys and invitation tokens
are never written, even at debug level, while a real gateway process serves every flow that carries them."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.gateway import GatewayProcess, register_tenant, revoke_key

PASSWORD = "correct horse battery"


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "debug.toml"
    path.write_text(f"""
[logging]
level = "debug"
json = true

[storage]
url = "sqlite:///{tmp_path / "secrets.db"}"

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
""")
    return path


def test_no_secret_is_logged_across_the_cabinet_and_model_api(tmp_path: Path) -> None:
    gateway = GatewayProcess(_config(tmp_path), cwd=tmp_path).start()
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
            invite_token = invitation.get("token") or invitation["invitation"]["token"]
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
