"""The plugin chain's order is checked when it is built: a step never runs before the step that fills in
what it reads (modelgate/proxy/pipeline/chain.py `requires` / `provides`)."""

from __future__ import annotations

from typing import cast

import pytest

from modelgate.plugins import CHAIN_PLUGINS
from modelgate.plugins.auth import Auth
from modelgate.plugins.body_limits import BodyLimits
from modelgate.plugins.model_routing import ModelRouting
from modelgate.plugins.policy import Policy
from modelgate.plugins.route_support import RouteSupport
from modelgate.plugins.tracing import RequestTracing
from modelgate.proxy.observability.tracing import Tracer
from modelgate.proxy.pipeline.chain import ChainOrderError, Plugin, PluginChain, check_order


class _ReadsTheModel(Plugin):
    name = "reads_the_model"
    requires = frozenset({"model"})


class _ProvidesTheModel(Plugin):
    name = "provides_the_model"
    provides = frozenset({"model"})


def test_the_default_chain_gives_every_step_what_it_reads() -> None:
    check_order(CHAIN_PLUGINS)


@pytest.mark.parametrize("left_out", [p for p in CHAIN_PLUGINS if not p.essential], ids=lambda p: p.name)
def test_each_optional_step_can_be_disabled_without_starving_a_later_one(left_out: type[Plugin]) -> None:
    check_order([p for p in CHAIN_PLUGINS if p is not left_out])


def test_a_step_listed_before_the_one_that_provides_its_input_is_refused_naming_both() -> None:
    with pytest.raises(ChainOrderError) as refused:
        check_order([Auth, RouteSupport])

    assert "auth runs before what it needs: route (provided by route_support, later in the chain)" in str(
        refused.value
    )


def test_a_step_whose_input_no_step_provides_is_refused() -> None:
    with pytest.raises(
        ChainOrderError, match=r"policy runs before what it needs: key \(provided by no step\)"
    ):
        check_order([RouteSupport, BodyLimits, ModelRouting, Policy])


def test_a_field_the_request_context_lacks_is_refused() -> None:
    class Misspelt(Plugin):
        name = "misspelt"
        requires = frozenset({"modle"})

    with pytest.raises(ChainOrderError, match=r"misspelt names no field of the request context: \['modle'\]"):
        check_order([Misspelt])


def test_building_a_chain_checks_its_order() -> None:
    with pytest.raises(ChainOrderError, match="reads_the_model runs before what it needs: model"):
        PluginChain([_ReadsTheModel(), _ProvidesTheModel()])

    assert PluginChain([_ProvidesTheModel(), _ReadsTheModel()]).names == (
        "provides_the_model",
        "reads_the_model",
    )


def test_tracing_switched_off_puts_no_hook_in_the_chain_and_switched_on_both() -> None:
    off = RequestTracing(None)
    on = RequestTracing(cast(Tracer, object()))  # never called: building the chain only looks at it

    assert PluginChain([off]).request_hooks == () and PluginChain([off]).complete_hooks == ()
    assert PluginChain([on]).request_hooks == (on.on_request,)
    assert PluginChain([on]).complete_hooks == (on.on_complete,)
