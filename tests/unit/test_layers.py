"""The layer rules of the code base, checked on every module: each package imports only the packages below
it, so no two packages import each other (docs/architecture.md draws the layers).

    config < storage < infra < domain < proxy < plugins < cabinet < modelgate (cli, gateway, server, ...)

Every import counts: at module level, inside functions and under `TYPE_CHECKING`.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

# Bottom first. "modelgate" is the composition root: the modules directly in the modelgate package.
LAYERS = ("config", "storage", "infra", "domain", "proxy", "plugins", "cabinet", "modelgate")
_RANK = {layer: rank for rank, layer in enumerate(LAYERS)}


def _modules() -> dict[str, Path]:
    """Every module of the installed modelgate namespace, by name, with its source file."""
    found: dict[str, Path] = {}
    for layer in LAYERS:
        name = "modelgate" if layer == "modelgate" else f"modelgate.{layer}"
        package = importlib.import_module(name)
        found[name] = Path(package.__file__)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            spec = info.module_finder.find_spec(info.name.rpartition(".")[2], None)
            found[info.name] = Path(spec.origin)
    return found


MODULES = _modules()


def _layer(module: str) -> str:
    """The layer of a module name of the modelgate namespace."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in _RANK else "modelgate"


def _imports(module: str, source: Path) -> set[str]:
    """The modelgate modules (or packages) `module` imports, wherever in the file the import is."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names if alias.name.startswith("modelgate"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the importing package
                base = module.split(".")
                if source.name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.startswith("modelgate"):
                imported.add(target)
                # `from modelgate import storage` names a package, not a symbol
                imported.update(
                    f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in MODULES
                )
    return imported


def test_every_module_of_the_namespace_imports() -> None:
    failures = {}
    for name in MODULES:
        if name.endswith("__main__"):
            continue  # runs the CLI
        try:
            importlib.import_module(name)
        except Exception as exc:  # report all at once
            failures[name] = repr(exc)
    assert failures == {}
    assert len(MODULES) > 100  # the walk found the layer folders, not just the root package


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_own_layer_and_those_below(module: str) -> None:
    rank = _RANK[_layer(module)]
    above = sorted(target for target in _imports(module, MODULES[module]) if _RANK[_layer(target)] > rank)
    assert above == [], f"{module} ({_layer(module)}) imports from higher layers"


def test_no_two_packages_import_each_other() -> None:
    edges: dict[str, set[str]] = {layer: set() for layer in LAYERS}
    for module, source in MODULES.items():
        for target in _imports(module, source):
            if _layer(target) != _layer(module):
                edges[_layer(module)].add(_layer(target))
    cycles = sorted((a, b) for a in edges for b in edges[a] if a in edges[b])
    assert cycles == []


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    # The rule above must be able to fail: a domain module importing the proxy is caught.
    source = tmp_path / "probe.py"
    source.write_text("from modelgate.proxy.pipeline.context import RequestContext\n", encoding="utf-8")
    targets = _imports("modelgate.domain.probe", source)
    assert [t for t in targets if _RANK[_layer(t)] > _RANK["domain"]] == ["modelgate.proxy.pipeline.context"]
