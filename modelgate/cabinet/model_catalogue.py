"""GET /api/models: the models an organization may use, with their prices, context windows and limits.

The models come from the config; the organization's own rules decide which of them it may use (a deny rule
of the organization removes a model, and allow rules of the organization, when there are any, keep only the
models they match). Each model lists the plan's limits and the access rules whose patterns match it, with
their subject, so a reader sees what bounds a request before sending one. The same catalogue checks the
model patterns of a policy rule: a pattern that matches no model is refused (`check_patterns_match`).
"""

from __future__ import annotations

import fnmatch
from typing import Any

from aiohttp import web

from modelgate.cabinet.auth import authenticate
from modelgate.cabinet.organizations import require_organization
from modelgate.cabinet.requests import bad_request, json_response
from modelgate.cabinet.services import services_of
from modelgate.config import Config, ModelConfig
from modelgate.config.schema import PlanConfig, TokenPriceConfig
from modelgate.domain.money import to_micros
from modelgate.domain.policy_rules import ACCESS_EFFECTS, PolicyRule, policy_rules_of
from modelgate.domain.prices import TokenRates

# The token kinds of a price sheet under their API names, in the order a reader expects them.
TOKEN_KINDS = (
    ("input", "input"),
    ("cachedInput", "cached_input"),
    ("cacheWrite5m", "cache_write_5m"),
    ("cacheWrite1h", "cache_write_1h"),
    ("inputAudio", "input_audio"),
    ("inputImage", "input_image"),
    ("output", "output"),
    ("reasoning", "reasoning"),
    ("outputAudio", "output_audio"),
    ("outputImage", "output_image"),
)


def _token_prices(prices: TokenPriceConfig, sheet: TokenPriceConfig | None = None) -> dict[str, float]:
    """Currency units per million tokens of each kind, derived as the charge derives them."""
    rates = TokenRates.of(prices, sheet)
    return {name: getattr(rates, field) for name, field in TOKEN_KINDS}


def _unit_prices(model: ModelConfig) -> dict[str, int]:
    """The per-unit prices the sheet names (micro-units), leaving out those it does not charge."""
    prices = model.prices
    named = {
        "perRequestMicros": prices.per_request,
        "perImageMicros": prices.per_image,
        "perAudioSecondMicros": prices.per_audio_second,
        "perVideoSecondMicros": prices.per_video_second,
        "perWebSearchCallMicros": prices.per_web_search_call,
        "perFileSearchCallMicros": prices.per_file_search_call,
        "perCodeInterpreterCallMicros": prices.per_code_interpreter_call,
    }
    return {name: to_micros(value) for name, value in named.items() if value}


def _rule_limits(rule: PolicyRule) -> dict[str, Any]:
    budget = None
    if rule.budget_micros is not None:
        budget = {"amountMicros": rule.budget_micros, "period": rule.budget_period}
    return {
        "ruleId": rule.id,
        "subjectType": rule.subject_type,
        "subjectId": rule.subject_id,
        "effect": rule.effect,
        "models": list(rule.models),
        "budget": budget,
        "rpm": rule.rpm,
        "tpm": rule.tpm,
    }


def plan_limits_json(plan: PlanConfig | None) -> dict[str, Any] | None:
    """The plan's limits (0: unlimited): per-key RPM and TPM, realtime connections and credit."""
    if plan is None:
        return None
    return {
        "code": plan.code,
        "name": plan.name,
        "rpm": plan.rpm,
        "tpm": plan.tpm,
        "realtimeConcurrency": plan.realtime_concurrency,
        "creditLimitMicros": to_micros(plan.credit_limit),
    }


def model_json(model: ModelConfig, rules: list[PolicyRule]) -> dict[str, Any]:
    """One model of the catalogue: kinds, prices (per million tokens), context window and matching rules."""
    prices = model.prices
    return {
        "id": model.name,
        "kinds": list(model.kinds),
        "contextWindow": model.max_context_tokens,
        "defaultMaxTokens": model.default_max_tokens,
        "prices": {
            "perMillionTokens": _token_prices(prices.tokens),
            **_unit_prices(model),
            "longContext": [
                {
                    "aboveInputTokens": tier.above_input_tokens,
                    "perMillionTokens": _token_prices(tier.tokens, prices.tokens),
                }
                for tier in prices.long_context
            ],
            "serviceTiers": {
                name: {"perMillionTokens": _token_prices(tier, prices.tokens)}
                for name, tier in prices.service_tiers
            },
            "source": prices.source,
        },
        "rules": [
            _rule_limits(rule) for rule in rules if rule.effect in ACCESS_EFFECTS and rule.matches(model.name)
        ],
    }


def usable_by_organization(model: str, organization_rules: list[PolicyRule]) -> bool:
    """Whether the organization's own rules let any of its keys use the model (system and key rules can only
    narrow that further, or widen it for themselves, which the model's `rules` show)."""
    allows = [rule for rule in organization_rules if rule.effect == "allow"]
    if any(rule.effect == "deny" and rule.matches(model) for rule in organization_rules):
        return False
    return not allows or any(rule.matches(model) for rule in allows)


def check_patterns_match(config: Config, patterns: tuple[str, ...]) -> None:
    """400 naming the first pattern that matches none of the configured models."""
    names = [model.name for model in config.models]
    for index, pattern in enumerate(patterns):
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            raise bad_request(
                f'models[{index}]: the pattern "{pattern}" matches no model (see GET /api/models)'
            )


async def list_models(request: web.Request) -> web.Response:
    """GET /models (any role) → `{models, plan, currency}`: each model the organization may use, and its
    plan's limits."""
    services = services_of(request)
    principal = await authenticate(request)
    db = services.db
    org = await require_organization(db, principal.organization_id)
    rules = await policy_rules_of(db, org.id)
    organization_rules = [
        rule for rule in rules if rule.subject_type == "organization" and rule.effect in ACCESS_EFFECTS
    ]
    models = [
        model_json(model, rules)
        for model in services.config.models
        if usable_by_organization(model.name, organization_rules)
    ]
    return json_response(
        {
            "models": models,
            "plan": plan_limits_json(services.config.plan(org.plan_code)),
            "currency": services.config.billing.currency,
        }
    )
