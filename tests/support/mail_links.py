"""Reading the links the gateway sent to an address, as its operator does (without `[email]` they wait in
the outbox for the operator: `GET /api/operator/mail`, `modelgate mail pending`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson


def token_of_link(link: str) -> str:
    """The token of a cabinet link such as `http://host/#/accept-invitation?token=…`."""
    return parse_qs(urlsplit(link).fragment.partition("?")[2])["token"][0]


def _newest(mail: list[dict[str, object]], email: str, kind: str) -> str:
    links = [str(m["link"]) for m in mail if m["to"] == email and m["kind"] == kind]
    assert links, f"no {kind} link waits for {email}"
    return token_of_link(links[-1])


def link_token_from_operator_api(base_url: str, operator_token: str, email: str, kind: str) -> str:
    """The token of the newest waiting `kind` link to `email`, read through the operator API."""
    reply = httpx.get(
        f"{base_url}/api/operator/mail", headers={"Authorization": f"Bearer {operator_token}"}, timeout=30
    )
    assert reply.status_code == 200, reply.text
    return _newest(reply.json()["mail"], email, kind)


def link_token_from_cli(config_path: Path, email: str, kind: str, cwd: Path | None = None) -> str:
    """The same through `modelgate mail pending --json` on the gateway's storage."""
    printed = subprocess.run(
        [sys.executable, "-m", "modelgate", "mail", "pending", "--json", "--config", str(config_path)],
        capture_output=True,
        check=True,
        cwd=cwd,
        timeout=60,
    ).stdout
    return _newest(orjson.loads(printed)["mail"], email, kind)
