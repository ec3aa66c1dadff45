"""Policy rules on the model API: 403 for a denied model, 404 for one not enabled; the decision carries the
budgets and the rpm/tpm overrides for the later steps."""

from __future__ import annotations

import pytest

from modelgate.domain.errors import ModelNotFound, PolicyBlocked
from modelgate.plugins.policy import Policy
from tests.support.plugin_context import (
    CHAT,
    PluginServices,
    StoredKey,
    add_key,
    add_policy_rule,
    context_before,
    run_hook,
)


async def _decided(services: PluginServices, key: StoredKey, payload: dict = CHAT):
    ctx = await context_before("policy", services, payload=payload, key=key.record)
    await run_hook(Policy(services.policies).on_request(ctx))
    return ctx


async def test_an_organization_without_rules_may_use_every_model(
    services: PluginServices, key: StoredKey
) -> None:
    ctx = await _decided(services, key)

    assert ctx.policy.organization_id == key.record.organization_id
    assert (ctx.decision.denied, ctx.decision.not_enabled, ctx.decision.budget_rules) == (False, False, ())


async def test_a_denied_model_is_403_permission_error(services: PluginServices, key: StoredKey) -> None:
    await add_policy_rule(services, key.record, effect="deny", models=("gpt-*",))

    with pytest.raises(PolicyBlocked) as caught:
        await _decided(services, key)

    assert (caught.value.status, caught.value.type_b) == (403, "permission_error")
    assert "`gpt-test` is blocked by a policy rule" in caught.value.message


async def test_a_model_outside_the_allowed_ones_is_404_model_not_found(
    services: PluginServices, key: StoredKey
) -> None:
    await add_policy_rule(services, key.record, effect="allow", models=("openai-only",))

    with pytest.raises(ModelNotFound) as caught:
        await _decided(services, key)

    assert caught.value.code == "model_not_found"


async def test_a_system_rule_applies_to_the_keys_of_that_system_only(services: PluginServices) -> None:
    in_system = await add_key(services, system=True)
    outside = await add_key(services, organization_id=in_system.record.organization_id)
    await add_policy_rule(services, in_system.record, effect="deny", subject="system")

    with pytest.raises(PolicyBlocked):
        await _decided(services, in_system)
    ctx = await _decided(services, outside)

    assert not ctx.decision.denied


async def test_the_key_rules_rate_override_wins_over_the_organizations(
    services: PluginServices, key: StoredKey
) -> None:
    await add_policy_rule(services, key.record, rpm=100, tpm=1000)
    await add_policy_rule(services, key.record, subject="key", rpm=5)

    ctx = await _decided(services, key)

    assert (ctx.decision.rpm, ctx.decision.tpm) == (5, 1000)


async def test_a_budget_rule_that_matches_goes_on_the_decision(
    services: PluginServices, key: StoredKey
) -> None:
    rule_id = await add_policy_rule(
        services, key.record, models=("gpt-*",), budget_usd=5.0, budget_period="day"
    )

    ctx = await _decided(services, key)

    assert [rule.id for rule in ctx.decision.budget_rules] == [rule_id]


async def test_a_route_naming_no_model_reads_the_policy_and_decides_nothing(
    services: PluginServices, key: StoredKey
) -> None:
    await add_policy_rule(services, key.record, effect="deny")
    ctx = await context_before("policy", services, method="GET", path="/v1/models", key=key.record)

    await run_hook(Policy(services.policies).on_request(ctx))

    assert ctx.policy is not None and ctx.decision is None
