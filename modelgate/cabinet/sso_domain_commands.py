"""`modelgate sso …`: the operator approves a single sign-on domain for an organization, or releases one from
whichever organization holds it, on the configured storage or through a running gateway's operator API
(`--url`), like `modelgate billing` (docs/cabinet.md, "Single sign-on domains")."""

from __future__ import annotations

import sqlite3
import sys
from typing import Any
from urllib.parse import quote

import asyncpg

from modelgate.cabinet.billing_commands import (
    EXIT_ERROR,
    EXIT_OK,
    CommandError,
    call_operator_api,
    open_storage,
    url_token,
)
from modelgate.cabinet.oidc.domain_routes import approve_domain, release_held_domain
from modelgate.cabinet.oidc.domains import claimable_domain
from modelgate.cabinet.requests import CabinetError
from modelgate.config import Config
from modelgate.storage import StorageError

COMMANDS = ("approve-domain", "release-domain")


async def _via_storage(config: Config, command: str, organization_id: str, domain: str) -> dict[str, Any]:
    db = await open_storage(config)
    try:
        if command == "approve-domain":
            claim = await approve_domain(db, organization_id, domain)
        else:
            claim = await release_held_domain(db, domain)
        return {"organizationId": claim.organization_id, **claim.to_json()}
    except CabinetError as exc:
        raise CommandError(exc.message) from exc
    except (StorageError, asyncpg.PostgresError, sqlite3.Error, OSError) as exc:
        raise CommandError(f"storage error: {exc}") from exc
    finally:
        await db.close()


async def _via_api(url: str, token: str, command: str, organization_id: str, domain: str) -> dict[str, Any]:
    if command == "approve-domain":
        path = f"/organizations/{quote(organization_id, safe='')}/sso-domains"
        return await call_operator_api(url, token, "POST", path, {"domain": domain})
    return await call_operator_api(url, token, "DELETE", f"/sso-domains/{quote(domain, safe='')}")


async def run_sso_command(
    command: str,
    *,
    config: Config | None,
    url: str | None = None,
    token: str | None = None,
    organization_id: str = "",
    domain: str = "",
) -> int:
    """Run one of `COMMANDS`; prints what was done and returns the exit code."""
    try:
        try:
            domain = claimable_domain(domain)
        except CabinetError as exc:
            raise CommandError(exc.message) from exc
        if url is not None:
            result = await _via_api(url, url_token(token), command, organization_id, domain)
        elif config is not None:
            result = await _via_storage(config, command, organization_id, domain)
        else:
            raise CommandError("no config to find the storage in; give --config FILE or --url")
    except CommandError as exc:
        print(f"modelgate sso {command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if command == "approve-domain":
        print(f"{result['domain']} is verified for organization {result['organizationId']} (by the operator)")
    else:
        print(f"{result['domain']} released from organization {result['organizationId']}")
    return EXIT_OK
