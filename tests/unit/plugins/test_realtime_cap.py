"""The realtime cap: at most the plan's `realtime_concurrency` open sessions per organization."""

from __future__ import annotations

import time

import pytest

from modelgate.domain.errors import RateLimited
from modelgate.plugins.model_routing import ModelRouting
from modelgate.plugins.realtime_cap import RealtimeCap
from modelgate.plugins.realtime_credentials import RealtimeCredentials
from modelgate.proxy.realtime.secrets import ClientSecret, InProcessSecrets
from tests.support.plugin_context import PluginServices, StoredKey, add_key, context_before, run_hook


async def _connect(services: PluginServices, key: StoredKey, secrets: InProcessSecrets):
    """A realtime connect with a fresh secret, claimed and routed as the steps before the cap do it."""
    value = f"ek_{time.perf_counter_ns()}"
    record = key.record
    await secrets.mint(
        value, ClientSecret(record.id, record.organization_id, "gpt-test", {}, int(time.time()) + 60)
    )
    ctx = await context_before(
        "realtime_credentials", services, method="GET", path=f"/v1/realtime?client_secret={value}", key=record
    )
    await run_hook(RealtimeCredentials(secrets).on_request(ctx))
    ModelRouting(services.catalog).on_request(ctx)
    return ctx


async def test_a_session_takes_a_slot_of_its_organization(services: PluginServices, key: StoredKey) -> None:
    ctx = await _connect(services, key, InProcessSecrets())

    await run_hook(RealtimeCap(services.config, services.counters).on_request(ctx))

    assert ctx.realtime.slot == f"rt:o:{{{key.record.organization_id}}}"


async def test_a_session_over_the_plans_cap_is_429(services: PluginServices, key: StoredKey) -> None:
    secrets, plugin = InProcessSecrets(), RealtimeCap(services.config, services.counters)
    await run_hook(plugin.on_request(await _connect(services, key, secrets)))  # the free plan allows one
    second = await _connect(services, key, secrets)

    with pytest.raises(RateLimited, match="at most 1 open realtime session") as caught:
        await run_hook(plugin.on_request(second))

    assert (caught.value.status, caught.value.code) == (429, "rate_limit_exceeded")
    assert second.realtime.slot is None


async def test_the_slot_is_given_back_when_the_session_ends(services: PluginServices, key: StoredKey) -> None:
    secrets, plugin = InProcessSecrets(), RealtimeCap(services.config, services.counters)
    first = await _connect(services, key, secrets)
    await run_hook(plugin.on_request(first))
    await run_hook(plugin.on_complete(first))
    second = await _connect(services, key, secrets)

    await run_hook(plugin.on_request(second))

    assert first.realtime.slot is None
    assert second.realtime.slot is not None


async def test_a_plan_without_a_cap_takes_no_slot(services: PluginServices) -> None:
    postpaid = await add_key(services, plan="postpaid")
    ctx = await _connect(services, postpaid, InProcessSecrets())

    await run_hook(RealtimeCap(services.config, services.counters).on_request(ctx))

    assert ctx.realtime.slot is None


async def test_requests_that_are_no_realtime_connect_are_left_alone(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await context_before(
        "realtime_cap", services, payload={"model": "gpt-test", "messages": []}, key=key.record
    )

    await run_hook(RealtimeCap(services.config, services.counters).on_request(ctx))

    assert ctx.realtime is None
    assert await services.counters.acquire(f"rt:o:{{{key.record.organization_id}}}", 1)  # the slot is free
