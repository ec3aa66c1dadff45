"""Policy Rules on the model API: 403 for a denied model, 404 `model_not_found` for one not enabled.

The organization's compiled policy is cached and dropped the moment a rule changes (see
modelgate/domain/policy_decisions.py for the evaluation order). The decision also carries the rule budgets and
the rpm/tpm overrides for the billing and rate-limit plugins.
"""

from __future__ import annotations

from modelgate.domain.errors import PolicyBlocked
from modelgate.domain.policy_decisions import PolicyDirectory
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

    async def on_request(self, ctx: RequestContext) -> None:
        key = ctx.api_key
        ctx.policy = await self._policies.policy(key.organization_id)
        if ctx.model is None:
            return
        decision = ctx.policy.decide(key.id, key.system_id, ctx.model.name)
        if decision.not_enabled:
            raise model_not_found(ctx.model.name)
        if decision.denied:
            raise PolicyBlocked(
                f"Access to the model `{ctx.model.name}` is blocked by a policy rule of your organization."
            )
        if decision.content_key is not None:  # its content rules are compiling, off the event loop
            decision = await ctx.policy.settled(decision, key.id, key.system_id, ctx.model.name)
        ctx.decision = decision
