"""Fixtures of the cabinet suite: the cabinet app mounted under /api on a real loopback server, over the
real database of both backends (`db` from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest
from aiohttp import web

from modelgate.cabinet.app import build_cabinet_app
from modelgate.cabinet.services import CabinetServices
from modelgate.config import Config, load_config
from modelgate.storage import Database
from tests.integration.cabinet.cabinet_client import Cabinet, RecordingSink

CabinetFactory = Callable[..., Awaitable[Cabinet]]


def cabinet_config(**cabinet_settings: object) -> Config:
    """The embedded default config with some `[cabinet]` settings changed."""
    config = load_config(None)
    return replace(config, cabinet=replace(config.cabinet, **cabinet_settings))


@pytest.fixture
def start_cabinet(aiohttp_client, db: Database) -> CabinetFactory:
    """Start a cabinet server (mounted like the gateway does) with an optional config and sink."""

    async def start(config: Config | None = None, sink: RecordingSink | None = None) -> Cabinet:
        sink = sink or RecordingSink()
        root = web.Application()
        root.add_subapp("/api", build_cabinet_app(CabinetServices(config or load_config(None), db, sink)))
        return Cabinet(await aiohttp_client(root), db, sink)

    return start


@pytest.fixture
async def cabinet(start_cabinet: CabinetFactory) -> Cabinet:
    """A cabinet server on the default config."""
    return await start_cabinet()
