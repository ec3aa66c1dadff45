"""One domain layer: a concept the gateway and the cabinet share is defined once, and only repositories
write SQL (handlers and the gateway's directories call them).

SQL is recognised in string literals (docstrings aside) by its statement keywords.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

_SQL = re.compile(r"\b(SELECT\b.*\bFROM|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\b", re.DOTALL)

# Callers of the shared repositories: the gateway's key lookup, compiled policies, reservations and
# allowances, and the cabinet's money and organization helpers.
_REPOSITORY_CALLERS = (
    "modelgate.proxy.state.keys",
    "modelgate.domain.policy_decisions",
    "modelgate.domain.accounts",
    "modelgate.domain.allowance",
    "modelgate.cabinet.billing",
    "modelgate.cabinet.organizations",
)


def _tree(module: str) -> ast.Module:
    return ast.parse(Path(importlib.import_module(module).__file__).read_text(encoding="utf-8"))


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _sql_literals(module: str) -> list[str]:
    """The string literals of a module that are SQL statements (f-strings read with their holes empty)."""
    tree = _tree(module)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
        else:
            continue
        if _SQL.search(text):
            found.append(text)
    return found


def _handler_modules() -> list[str]:
    """The cabinet modules that define an aiohttp handler (a function taking `request: web.Request`)."""
    root = Path(importlib.import_module("modelgate.cabinet").__file__).parent
    modules = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        module = ".".join(
            ("modelgate.cabinet", *parts[:-1], *(() if parts[-1] == "__init__" else parts[-1:]))
        )
        if "request: web.Request" in path.read_text(encoding="utf-8"):
            modules.append(module)
    return modules


def test_the_sql_pattern_recognises_a_query_and_not_prose() -> None:
    assert _SQL.search("SELECT id FROM api_keys WHERE secret_hash = $1")
    assert _SQL.search("UPDATE organizations SET plan_code = $2 WHERE id = $1")
    assert not _SQL.search("Select the rules that apply; update the cache when a rule changes.")


@pytest.mark.parametrize("module", _handler_modules())
def test_cabinet_handler_modules_write_no_sql(module: str) -> None:
    assert _sql_literals(module) == []


@pytest.mark.parametrize("module", _REPOSITORY_CALLERS)
def test_shared_concepts_are_read_and_written_through_repositories(module: str) -> None:
    assert _sql_literals(module) == []


def test_a_policy_rule_is_one_record_for_the_gateway_and_the_cabinet() -> None:
    from modelgate.cabinet import policy_rules as cabinet_rules
    from modelgate.domain import policy_decisions, policy_rules

    assert policy_decisions.PolicyRule is policy_rules.PolicyRule
    assert cabinet_rules.PolicyRule is policy_rules.PolicyRule
