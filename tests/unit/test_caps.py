"""Output caps: what a request may generate is bounded, filled in when absent, and multiplied by `n`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from modelgate.config import ModelConfig, RowConfig
from modelgate.domain.errors import InvalidRequest
from modelgate.plugins.output_caps import ensure_estimate
from modelgate.proxy.pipeline.context import RequestContext
from modelgate.proxy.pipeline.route_table import ROUTES

_ROUTES = {route.name: route for route in ROUTES}
MODEL = ModelConfig("m", ("chat",), (RowConfig("p", "m"),), default_max_tokens=100, max_context_tokens=1000)


def _context(route: str, payload: dict) -> RequestContext:
    ctx = RequestContext(None, "req", 0.0)  # a request object is not needed to bound a payload
    ctx.route = _ROUTES[route]
    ctx.model = SimpleNamespace(config=MODEL)
    ctx.payload = payload
    ctx.body = b"x" * 99
    return ctx


def test_a_chat_without_a_cap_gets_the_default_sent_upstream() -> None:
    ctx = _context("chat_completions", {"messages": []})
    ensure_estimate(ctx)
    assert ctx.admission.max_output_tokens == 100
    assert ctx.payload["max_completion_tokens"] == 100 and ctx.payload_changed
    assert ctx.admission.estimated_input_tokens == 99 // 2 + 1


def test_a_named_cap_is_kept_and_the_body_left_alone() -> None:
    ctx = _context("chat_completions", {"max_tokens": 7})
    ensure_estimate(ctx)
    assert (ctx.admission.max_output_tokens, ctx.payload_changed) == (7, False)
    assert "max_completion_tokens" not in ctx.payload


def test_the_larger_of_two_caps_is_reserved() -> None:
    ctx = _context("chat_completions", {"max_tokens": 7, "max_completion_tokens": 9})
    ensure_estimate(ctx)
    assert ctx.admission.max_output_tokens == 9


def test_n_multiplies_the_allowance() -> None:
    ctx = _context("chat_completions", {"max_tokens": 10, "n": 3})
    ensure_estimate(ctx)
    assert ctx.admission.max_output_tokens == 30


def test_best_of_multiplies_a_legacy_completion_and_its_default_is_sixteen() -> None:
    ctx = _context("completions", {"prompt": "x", "n": 2, "best_of": 5})
    ensure_estimate(ctx)
    assert ctx.admission.max_output_tokens == 16 * 5
    assert ctx.payload["max_tokens"] == 16


def test_responses_fill_max_output_tokens() -> None:
    ctx = _context("responses", {"input": "x"})
    ensure_estimate(ctx)
    assert ctx.payload["max_output_tokens"] == 100


@pytest.mark.parametrize("value", [10.5, 1e30, "10", True, 0, -1, {"n": 1}, [1], 1001])
def test_caps_that_are_not_positive_integers_within_the_context_are_refused(value) -> None:
    ctx = _context("chat_completions", {"max_tokens": value})
    with pytest.raises(InvalidRequest, match="max_tokens"):
        ensure_estimate(ctx)


@pytest.mark.parametrize("value", [0, 1.5, "2", 129, False])
def test_n_outside_one_to_128_is_refused(value) -> None:
    ctx = _context("chat_completions", {"max_tokens": 5, "n": value})
    with pytest.raises(InvalidRequest, match="'n'"):
        ensure_estimate(ctx)


def test_an_explicit_null_cap_counts_as_absent() -> None:
    ctx = _context("chat_completions", {"max_tokens": None})
    ensure_estimate(ctx)
    assert ctx.admission.max_output_tokens == 100


def test_kinds_without_generated_output_reserve_one_token() -> None:
    ctx = _context("embeddings", {"input": "x"})
    ensure_estimate(ctx)
    assert ctx.admission.max_output_tokens == 1 and not ctx.payload_changed
