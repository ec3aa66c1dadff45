"""Service tiers: a request may name a tier only when its model's price sheet prices it (400 otherwise)."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import InvalidRequest
from modelgate.plugins.service_tiers import ServiceTiers
from tests.support.plugin_context import CHAT, PluginServices, context_before


async def _chat(services: PluginServices, **fields: object):
    return await context_before("service_tiers", services, payload={**CHAT, **fields})


@pytest.mark.parametrize("tier", [None, "auto", "default"])
async def test_the_default_tier_passes_on_a_sheet_without_tiers(services: PluginServices, tier) -> None:
    ctx = await _chat(services, **({} if tier is None else {"service_tier": tier}))

    ServiceTiers().on_request(ctx)


async def test_a_tier_the_sheet_does_not_price_is_refused_naming_it(services: PluginServices) -> None:
    ctx = await _chat(services, service_tier="priority")

    with pytest.raises(InvalidRequest) as refused:
        ServiceTiers().on_request(ctx)

    assert "'priority' is not priced for model 'gpt-test'" in refused.value.message


async def test_a_tier_that_is_not_a_string_is_refused(services: PluginServices) -> None:
    ctx = await _chat(services, service_tier={"name": "priority"})

    with pytest.raises(InvalidRequest) as refused:
        ServiceTiers().on_request(ctx)

    assert refused.value.message == "Invalid 'service_tier': expected a string."
