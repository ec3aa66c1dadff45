"""Rate limits: each request records the RPM/TPM windows it counts in for the admission step; a request
that can never fit a TPM limit is 429 at once; completion corrects the token windows to the real usage."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import RateLimited
from modelgate.plugins.admission import Admission, pending
from modelgate.plugins.rate_limits import RateLimits
from modelgate.proxy.pipeline.context import Usage
from tests.support.plugin_context import (
    CHAT,
    PluginServices,
    StoredKey,
    add_key,
    add_policy_rule,
    answered,
    context_before,
    run_hook,
)


async def _limited(services: PluginServices, key: StoredKey, payload: dict = CHAT):
    ctx = await context_before("rate_limits", services, payload=payload, key=key.record)
    RateLimits(services.config, services.counters).on_request(ctx)
    return ctx


async def test_the_key_and_organization_windows_are_recorded_for_admission(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _limited(services, key)

    tokens = ctx.admission.estimated_input_tokens + 100
    record = key.record
    admission = pending(ctx)
    assert admission.windows == [
        (record.rpm_window, 1, 60),
        (record.org_rpm_window, 1, 60),
        (record.tpm_window, tokens, 100000),
        (record.org_tpm_window, tokens, 100000),
    ]
    assert (admission.first_tpm, admission.key_rpm, admission.key_tpm) == (2, 60, 100000)
    assert not admission.taken


async def test_a_plan_without_limits_records_nothing(services: PluginServices) -> None:
    ctx = await _limited(services, await add_key(services, plan="postpaid"))

    assert not ctx.admission.asked


async def test_a_policy_override_sets_the_keys_windows_and_leaves_the_organizations(
    services: PluginServices, key: StoredKey
) -> None:
    await add_policy_rule(services, key.record, subject="key", rpm=5)

    ctx = await _limited(services, key)

    limits = [limit for _window, _amount, limit in pending(ctx).windows[:2]]
    assert limits == [5, 60]


async def test_a_request_over_the_tpm_limit_alone_is_429_not_to_be_retried(services: PluginServices) -> None:
    tight = await add_key(services, plan="tight")  # 5000 tokens a minute

    with pytest.raises(RateLimited) as caught:
        await _limited(services, tight, {**CHAT, "max_tokens": 6000})

    assert (caught.value.status, caught.value.code) == (429, "rate_limit_exceeded")
    assert caught.value.headers == {"x-should-retry": "false"}


async def test_completion_corrects_the_token_windows_to_the_real_usage(
    services: PluginServices, key: StoredKey
) -> None:
    plugin = RateLimits(services.config, services.counters)
    ctx = await _limited(services, key)
    await run_hook(Admission(services.counters).on_request(ctx))
    answered(ctx, body=b"{}")
    ctx.metering.usage = Usage(input_tokens=7, output_tokens=3)

    await run_hook(plugin.on_complete(ctx))

    (probe,) = await services.counters.admit([(key.record.tpm_window, 0, 10**9)])
    assert probe.used == 10


async def test_a_request_that_sent_nothing_gives_its_tokens_back(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _limited(services, key)
    await run_hook(Admission(services.counters).on_request(ctx))
    ctx.status = 502  # no row answered

    await run_hook(RateLimits(services.config, services.counters).on_complete(ctx))

    (probe,) = await services.counters.admit([(key.record.org_tpm_window, 0, 10**9)])
    assert probe.used == 0
