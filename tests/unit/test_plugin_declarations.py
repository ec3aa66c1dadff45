"""Each plugin declares every field of the request context it touches: what it reads that another part
fills in (`requires`) and what it fills in (`provides`), so the order check of the chain
(modelgate/proxy/pipeline/chain.py) sees every dependency. Read from the plugins' source: every
`ctx.<field>` in the class's methods (its base classes' in the plugins package too) and in the functions
of modelgate/plugins they call."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
from collections.abc import Iterator
from types import ModuleType

import pytest

from modelgate.plugins import CHAIN_PLUGINS
from modelgate.plugins.request_id import SharedRequestId
from modelgate.proxy.pipeline.chain import GIVEN, Plugin
from modelgate.proxy.pipeline.context import RequestContext

FIELDS = frozenset(f.name for f in dataclasses.fields(RequestContext))
# The checked accessors (and the one method) of the context, by the fields they read.
ACCESSORS = {
    "matched_route": {"route"},
    "api_key": {"key"},
    "routed_model": {"model"},
    "json_payload": {"payload"},
    "served_row": {"row"},
    "answer_head": {"answer"},
    "upstream_body": {"payload", "payload_changed", "body"},
}
PLUGINS = (*CHAIN_PLUGINS, SharedRequestId)


@dataclasses.dataclass
class Touched:
    """The context fields a plugin's code reads or writes, and those it assigns (`ctx.field = ...`)."""

    fields: set[str] = dataclasses.field(default_factory=set)
    assigned: set[str] = dataclasses.field(default_factory=set)


def _functions(module: ModuleType) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(inspect.getsource(module))
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


def _callee(
    module: ModuleType, name: str
) -> tuple[ModuleType, ast.FunctionDef | ast.AsyncFunctionDef] | None:
    """The function `name` means in `module`, when it is defined in a module of modelgate/plugins."""
    target = getattr(module, name, None)
    if not inspect.isfunction(target) or not target.__module__.startswith("modelgate.plugins"):
        return None
    home = importlib.import_module(target.__module__)
    node = _functions(home).get(target.__name__)
    return (home, node) if node is not None else None


def _context_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The parameters of `function` that are the request context (annotated so, or named ctx)."""
    names = set()
    for arg in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs):
        annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
        if arg.arg == "ctx" or annotation == "RequestContext":
            names.add(arg.arg)
    return names


def _touch(
    module: ModuleType,
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    touched: Touched,
    seen: set[tuple[str, str]],
) -> None:
    seen.add((module.__name__, function.name))
    contexts = _context_names(function)
    for node in ast.walk(function):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in contexts:
            if node.attr in FIELDS:
                touched.fields.add(node.attr)
                if isinstance(node.ctx, ast.Store):
                    touched.assigned.add(node.attr)
            else:
                touched.fields |= ACCESSORS.get(node.attr, set())
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            found = _callee(module, node.func.id)
            if found is not None and (found[0].__name__, found[1].name) not in seen:
                _touch(*found, touched, seen)


def _methods(plugin: type[Plugin]) -> Iterator[tuple[ModuleType, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for cls in plugin.__mro__:
        if cls is Plugin or not cls.__module__.startswith("modelgate.plugins"):
            continue
        module = importlib.import_module(cls.__module__)
        (node,) = ast.parse(textwrap.dedent(inspect.getsource(cls))).body
        assert isinstance(node, ast.ClassDef)
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                yield module, item


def touched_by(plugin: type[Plugin]) -> Touched:
    """Every context field the code of `plugin` touches."""
    touched = Touched()
    seen: set[tuple[str, str]] = set()
    for module, method in _methods(plugin):
        _touch(module, method, touched, seen)
    return touched


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.__name__)
def test_a_plugin_declares_every_context_field_it_touches(plugin: type[Plugin]) -> None:
    touched = touched_by(plugin)
    assert sorted(touched.fields - GIVEN - plugin.requires - plugin.provides) == []


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.__name__)
def test_a_field_a_plugin_assigns_is_one_it_provides(plugin: type[Plugin]) -> None:
    touched = touched_by(plugin)
    assert sorted(touched.assigned - plugin.provides) == []


# A hook that reads the key through its accessor and, through billing_gate.final_cost (which the module
# usage_metering imports), the route, model, metering and admission.
_PROBE = """
def on_complete(self, ctx: RequestContext) -> None:
    log.info("%s %s", ctx.api_key.id, final_cost(ctx))
    ctx.outcome = "completed"
"""


def test_the_scan_sees_accessors_called_functions_and_assignments() -> None:
    """The probe that proves the scan can fail: it finds what a hook touches only indirectly."""
    (hook,) = ast.parse(_PROBE).body
    assert isinstance(hook, ast.FunctionDef)
    touched = Touched()
    _touch(importlib.import_module("modelgate.plugins.usage_metering"), hook, touched, set())
    assert {"key", "route", "model", "metering", "admission", "outcome"} <= touched.fields
    assert touched.assigned == {"outcome"}
