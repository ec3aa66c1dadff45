"""Policy Rules on the model API: 403 for a denied model, 404 `model_not_found` for one not enabled.

The organization's compiled policy is cached and dropped the moment a rule changes (see
modelgate/domain/policy_decisions.py for the evaluation order). The decision also carries the rule budgets and
the rpm/tpm overrides for the billing and rate-limit plugins.
"""

from __future__ import annotations

from collections.abc import Awaitable

from modelgate.domain.errors import PolicyBlocked
from modelgate.domain.policy_decisions import CompiledPolicy, Decision, PolicyDirectory
from modelgate.plugins.model_routing import model_not_found
from modelgate.proxy.pipeline.chain import Plugin
from modelgate.proxy.pipeline.context import RequestContext


class Policy(Plugin):
    """Applies the organization's policy rules to the requested model."""

    name = "policy"
    requires = frozenset({"key", "model"})
    provides = frozenset({"policy", "decision"})

    def __init__(self, policies: PolicyDirectory) -> None:
        self._policies = policies

    def on_request(self, ctx: RequestContext) -> Awaitable[None] | None:
        # A plain function: an organization whose policy is kept (the usual request) is decided on without
        # a coroutine; one read from the database, or content rules still compiling, are waited for in one.
        key = ctx.api_key
        policy = self._policies.cached(key.organization_id)
        if policy is None:
            return self._read_then_decide(ctx)
        ctx.policy = policy
        return self._decide(ctx, policy)

    async def _read_then_decide(self, ctx: RequestContext) -> None:
        ctx.policy = policy = await self._policies.policy(ctx.api_key.organization_id)
        settling = self._decide(ctx, policy)
        if settling is not None:
            await settling

    def _decide(self, ctx: RequestContext, policy: CompiledPolicy) -> Awaitable[None] | None:
        if ctx.model is None:
            return None
        key = ctx.api_key
        decision = policy.decide(key.id, key.system_id, ctx.model.name)
        if decision.not_enabled:
            raise model_not_found(ctx.model.name)
        if decision.denied:
            raise PolicyBlocked(
                f"Access to the model `{ctx.model.name}` is blocked by a policy rule of your organization."
            )
        if decision.content_key is not None:  # its content rules are compiling, off the event loop
            return self._settle(ctx, policy, decision)
        ctx.decision = decision
        return None

    async def _settle(self, ctx: RequestContext, policy: CompiledPolicy, decision: Decision) -> None:
        key, model = ctx.api_key, ctx.routed_model
        ctx.decision = await policy.settled(decision, key.id, key.system_id, model.name)
