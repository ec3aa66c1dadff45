"""Fixtures of the billing cabinet suite: the cabinet under /api on a real loopback server with a recording
billing sink, over both storage backends (`db` from tests/conftest.py)."""

from __future__ import annotations

import pytest
from aiohttp import web

from modelgate.cabinet.app import build_cabinet_app
from modelgate.cabinet.services import CabinetServices
from modelgate.config import Config
from modelgate.storage import Database
from tests.integration.billing_cabinet.billing_client import (
    BillingCabinet,
    BillingCabinetFactory,
    RecordingBillingSink,
    billing_config,
)
from tests.integration.cabinet.cabinet_client import RecordingSink


@pytest.fixture
def start_billing_cabinet(aiohttp_client, db: Database) -> BillingCabinetFactory:
    """Start a cabinet server mounted like the gateway does, with a recording billing sink."""

    async def start(config: Config | None = None) -> BillingCabinet:
        keys, billing = RecordingSink(), RecordingBillingSink(db)
        root = web.Application()
        root.add_subapp(
            "/api", build_cabinet_app(CabinetServices(config or billing_config(), db, keys, billing))
        )
        return BillingCabinet(await aiohttp_client(root), db, keys, billing)

    return start


@pytest.fixture
async def cabinet(start_billing_cabinet: BillingCabinetFactory) -> BillingCabinet:
    """A cabinet with the operator API enabled."""
    return await start_billing_cabinet()
