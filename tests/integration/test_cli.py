"""The `modelgate` command as an operator uses it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

BROKEN_CONFIG = """
[server]
port = "eighty"

[[providers]]
name = "openai"
kind = "openai"
base_url = "https://api.openai.com/v1"
api_key = "${MODELGATE_TEST_MISSING_KEY}"

[[models]]
name = "gpt"
kinds = ["chat"]
[[models.rows]]
provider = "opneai"

[[plans]]
code = "free"
"""


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def test_check_config_prints_one_precise_line_per_problem(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(BROKEN_CONFIG)
    result = run_cli("check-config", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"{path}: server.port: expected an integer, got string 'eighty'",
        f"{path}: providers[0].api_key: environment variable 'MODELGATE_TEST_MISSING_KEY' is not set",
        f"{path}: models[0].rows[0].provider: unknown provider 'opneai'; did you mean 'openai'?",
    ]


def test_serve_refuses_an_invalid_config_with_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(BROKEN_CONFIG)
    result = run_cli("serve", "--config", str(path), "--port", "1")
    assert result.returncode == 2
    assert "unknown provider 'opneai'; did you mean 'openai'?" in result.stderr
    assert "refusing to start" in result.stderr


def test_check_config_accepts_the_shipped_example_when_its_variables_are_set(tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "config" / "modelgate.example.toml"
    env = {name: "x" for name in re.findall(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)\}", example.read_text())}
    result = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "check-config", str(example)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


def test_migrate_applies_the_schema_once(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{tmp_path / "m.db"}"\n' + _minimal_models())
    first = run_cli("migrate", "--config", str(config))
    second = run_cli("migrate", "--config", str(config))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "applied 0 migration(s)" not in first.stdout
    assert "applied 0 migration(s)" in second.stdout


def _minimal_models() -> str:
    return (
        '[[providers]]\nname = "mock"\nkind = "mock"\n[[models]]\nname = "m"\nkinds = ["chat"]\n'
        '[[models.rows]]\nprovider = "mock"\n[[plans]]\ncode = "free"\n'
    )
