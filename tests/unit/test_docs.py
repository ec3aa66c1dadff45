"""The README and docs/ are checked against the tree: the README stays a short read whose config example
loads, and every repository path, relative link and code name the docs mention exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from modelgate.config import load_config
from modelgate.plugins import chain_plugins

REPOSITORY = Path(__file__).resolve().parents[2]
README = REPOSITORY / "README.md"
PAGES = [README, *sorted((REPOSITORY / "docs").rglob("*.md"))]
# A path in backticks or a link that starts at a folder of the repository: `modelgate/proxy/http/front.py`,
# `bench/matrix.py`, [x](../modelgate/config/defaults.toml). Globs and placeholders are not paths.
_TOP = r"(?:modelgate|tests|bench|docs|\.ci)/"
_BACKTICKED = re.compile(rf"`({_TOP}[\w./-]*)`")
# Outside backticks only what looks like a file (an extension) or a folder (a trailing slash): prose says
# "modelgate/passthrough ratios".
_NAMED = re.compile(rf"(?<![\w/.`-])({_TOP}[\w./-]*(?:\.[a-z]+\b|/))")
_LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)#\s]+)")
# A code name in backticks: a capitalised class name (`ModelRuntime`, `StreamRelay.relay`) or a call
# (`ledger_row()`, `plugins.chain_plugins()`). Names of other systems the docs quote are listed; everything
# else must be defined (a class, function or assigned name) somewhere in the package.
_CLASS_NAME = re.compile(r"`([A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)*)(?:\.\w+)*(?:\(\))?`")
_CALL_NAME = re.compile(r"`(?:[\w.]+\.)?([a-z_][a-z0-9_]*)\(\)`")
_OTHER_SYSTEMS = {
    "AccessDeniedException",  # Bedrock's error types
    "ExpiredTokenException",
    "InvalidSignatureException",
    "UnrecognizedClientException",
    "DeploymentNotFound",  # Azure OpenAI's
    "ResponsibleAIPolicyViolation",
    "GenerateContentResponse",  # Gemini's answer type
    "ClientSession",  # aiohttp's
    "HttpOnly",  # cookie attributes
    "Secure",
    "Authorization",  # HTTP header names
    "Date",
    "Expect",
    "Host",
    "Origin",
    "Upgrade",
    "Job",  # a Kubernetes resource
    "S256",  # the PKCE method
    "Schema",  # Gemini's schema object
    "PodMonitor",  # Prometheus operator resources
    "ServiceMonitor",
    "TimecodeScale",  # Matroska/WebM elements
    "Duration",
    "Info",
    "Segment",
}


def _named_paths(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    found = set(_BACKTICKED.findall(text)) | set(_NAMED.findall(text))
    return {path.rstrip(".") for path in found if "*" not in path and "NNNN" not in path}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPOSITORY).as_posix())
def test_every_repository_path_a_page_names_exists(page: Path) -> None:
    missing = sorted(path for path in _named_paths(page) if not (REPOSITORY / path).exists())
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPOSITORY).as_posix())
def test_every_relative_link_of_a_page_resolves(page: Path) -> None:
    links = _LINK.findall(page.read_text(encoding="utf-8"))
    missing = sorted(link for link in links if not (page.parent / link).exists())
    assert missing == []


def _defined_names() -> set[str]:
    names: set[str] = set()
    for source in (REPOSITORY / "modelgate").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.id if isinstance(node, ast.Name) else node.attr)
    return names


def _named_code(text: str) -> set[str]:
    return (set(_CLASS_NAME.findall(text)) - _OTHER_SYSTEMS) | set(_CALL_NAME.findall(text))


@pytest.fixture(scope="module")
def defined_names() -> set[str]:
    return _defined_names()


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPOSITORY).as_posix())
def test_every_code_name_a_page_mentions_exists(page: Path, defined_names: set[str]) -> None:
    missing = sorted(_named_code(page.read_text(encoding="utf-8")) - defined_names)
    assert missing == []


def test_a_code_name_that_moved_is_noticed(defined_names: set[str]) -> None:
    named = _named_code("`Runtime`, `ModelRuntime`, `StreamRelay.relay`, `ledger_row()`, `HttpOnly`")
    assert named == {"Runtime", "ModelRuntime", "StreamRelay", "ledger_row"}
    assert named - defined_names >= {"Runtime"}
    assert "ModelRuntime" in defined_names


def test_the_readme_is_a_five_minute_read() -> None:
    # About 200 words a minute; the reference lives in docs/.
    assert len(README.read_text(encoding="utf-8").split()) < 1_500


def test_the_readme_config_example_loads(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Configuration essentials") :]
    (example,) = re.findall(r"```toml\n(.*?)```", section[: section.index("\n## ", 1)], re.DOTALL)
    path = tmp_path / "readme.toml"
    path.write_text(example, encoding="utf-8")
    config = load_config(path, env={"OPENAI_API_KEY": "sk-test"}, chain=chain_plugins())
    assert [model.name for model in config.models] == ["gpt-4o-mini"]


def test_a_missing_path_is_noticed(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("See `modelgate/proxy/nothing_here.py` and modelgate/domain/ledger.py.\n", "utf-8")
    assert _named_paths(page) == {"modelgate/proxy/nothing_here.py", "modelgate/domain/ledger.py"}


def test_the_architecture_page_draws_the_chain_in_order() -> None:
    text = (REPOSITORY / "docs" / "architecture.md").read_text(encoding="utf-8")
    drawn = text[text.index("request phase:") : text.index("(these four act on the answer only)")]
    names = re.findall(r"(?:│    |→ )([a-z_]+)(?=\s)", drawn)
    assert names == [name for name, _essential in chain_plugins()]
