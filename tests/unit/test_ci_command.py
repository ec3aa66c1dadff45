"""CI runs exactly the test command the README gives a developer, so what passes in CI passes for them."""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def _readme_test_command() -> str:
    """The README's first command line that runs pytest (its comment left out)."""
    readme = (REPOSITORY / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```bash\n(.*?)```", readme, flags=re.DOTALL)
    assert first_block is not None
    [line] = [line for line in first_block.group(1).splitlines() if "pytest" in line]
    return line.split("  #", 1)[0].strip()


def test_ci_runs_the_readme_test_command_verbatim_as_its_last_step() -> None:
    script = (REPOSITORY / ".ci" / "run").read_text(encoding="utf-8")
    steps = [line for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert steps[-1] == _readme_test_command()


def test_the_readme_test_command_installs_everything_the_suite_needs_before_running_it() -> None:
    command = _readme_test_command()
    assert command.startswith("pip install -e '.[test]' && ")
    assert "npm ci --prefix tests/oidc_provider" in command  # the SSO tests' OpenID provider
    assert command.endswith("&& pytest")


def test_ci_lints_formatting_too() -> None:
    script = (REPOSITORY / ".ci" / "run").read_text(encoding="utf-8")
    assert "ruff format --check ." in script
