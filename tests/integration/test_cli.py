"""The `modelgate` command as an operator uses it."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modelgate.server import MIDDLE_GENERATION_THRESHOLD, YOUNG_GENERATION_THRESHOLD
from tests.support.gateway import ThreadedGateway, write_config

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
        [sys.executable, "-m", "modelgate", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
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
    example = Path(__file__).parents[2] / "modelgate" / "config" / "modelgate.example.toml"
    env = {name: "x" for name in re.findall(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)\}", example.read_text())}
    result = subprocess.run(
        [sys.executable, "-m", "modelgate", "check-config", str(example)],
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


def _serve_config(tmp_path: Path) -> Path:
    config = tmp_path / "serve.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{tmp_path / "s.db"}"\n' + _minimal_models())
    return config


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_serve_refuses_a_port_outside_1_to_65535_with_exit_code_2(tmp_path: Path, port: str) -> None:
    result = run_cli("serve", "--config", str(_serve_config(tmp_path)), "--port", port, timeout=20)
    assert result.returncode == 2
    assert "argument --port:" in result.stderr and port in result.stderr
    assert "Traceback" not in result.stderr and "ready" not in result.stdout + result.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_on_a_port_in_use_says_so_in_one_line_without_a_traceback(tmp_path: Path, workers: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(
            "serve", "--config", str(_serve_config(tmp_path)), "--host", "127.0.0.1", "--port", str(port),
            "--workers", workers, timeout=30,
        )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == f"modelgate: cannot listen on 127.0.0.1:{port}: address already in use\n"
    assert "ready" not in result.stdout  # nothing claims to serve a port it does not hold


def _wait_for_log(log_path: Path, pattern: str, process: subprocess.Popen) -> re.Match[str]:
    deadline = time.monotonic() + 30
    found = None
    while found is None and time.monotonic() < deadline and process.poll() is None:
        found = re.search(pattern, log_path.read_text())
        time.sleep(0.05)  # polling the running process's log; bounded by the deadline
    assert found, log_path.read_text()
    return found


@contextlib.contextmanager
def _serving_on_port_0(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path, int]]:
    """`modelgate serve --port 0` running: the process, its log and the port it logged."""
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "modelgate",
                "serve",
                "--config",
                str(_serve_config(tmp_path)),
                "--port",
                "0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        port = int(_wait_for_log(log_path, r"listening on http://127\.0\.0\.1:(\d+) ", process).group(1))
        yield process, log_path, port
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_serve_on_port_0_logs_the_port_it_got_and_serves_there(tmp_path: Path) -> None:
    with _serving_on_port_0(tmp_path) as (_process, _log, port):
        assert port != 0
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200


def _frozen_objects(port: int) -> float:
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    assert 'python_gc_collections_total{generation="0"}' in metrics
    return float(re.search(r"^modelgate_gc_frozen_objects (\S+)$", metrics, re.MULTILINE).group(1))


def test_a_served_process_keeps_its_startup_heap_out_of_the_garbage_collector_also_after_a_reload(
    tmp_path: Path,
) -> None:
    with _serving_on_port_0(tmp_path) as (process, log_path, port):
        assert _frozen_objects(port) > 10_000  # config, catalog, chain, the cabinet's routes, ...
        process.send_signal(signal.SIGHUP)
        _wait_for_log(log_path, r"config reloaded from ", process)
        assert _frozen_objects(port) > 10_000  # frozen again, the replaced runtime let go


def test_a_gateway_run_inside_another_program_leaves_its_garbage_collector_alone(tmp_path: Path) -> None:
    # The tests' gateway runs serve() in this process, as any program embedding it would.
    config = write_config(tmp_path / "gateway.toml", _serve_config(tmp_path).read_text())
    with ThreadedGateway(config) as gateway:
        assert _frozen_objects(gateway.port) == 0
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold()[0] != YOUNG_GENERATION_THRESHOLD


def test_a_gateway_process_collects_its_young_and_middle_generations_seldom() -> None:
    # What `modelgate serve` does to its own process before it accepts connections (freeze_startup_heap),
    # in a process of its own: the collector's settings are process-wide.
    script = "import gc; from modelgate.server import freeze_startup_heap; freeze_startup_heap(); "
    script += "print(*gc.get_threshold())"
    printed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    young, middle, oldest = map(int, printed.stdout.split())
    assert (young, middle) == (YOUNG_GENERATION_THRESHOLD, MIDDLE_GENERATION_THRESHOLD) == (10_000, 100)
    assert oldest == gc.get_threshold()[2]  # Python's own


def test_serve_refuses_port_0_with_several_workers(tmp_path: Path) -> None:
    config = str(_serve_config(tmp_path))
    result = run_cli("serve", "--config", config, "--port", "0", "--workers", "2", timeout=20)
    assert result.returncode == 2
    assert "--port 0" in result.stderr and "--workers 1" in result.stderr


def test_version_prints_the_installed_distribution_version() -> None:
    from importlib import metadata

    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"modelgate {metadata.version('modelgate')}"


def test_the_installed_modelgate_command_runs_the_cli() -> None:
    from importlib import metadata

    command = Path(sys.executable).with_name("modelgate")
    result = subprocess.run([str(command), "--version"], capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"modelgate {metadata.version('modelgate')}"
