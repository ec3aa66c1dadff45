"""The plugins' real collaborators, built once per test from the helper's config."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.plugin_context import PluginServices, StoredKey, add_key, open_services


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[PluginServices]:
    opened = await open_services(tmp_path)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def key(services: PluginServices) -> StoredKey:
    """An API key of a fresh organization on the free plan, $10 in its balance."""
    return await add_key(services, balance_usd=10.0)
