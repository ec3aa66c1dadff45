"""The real OpenID provider of the SSO tests: tests/oidc_provider/server.mjs (panva/oidc-provider) as a child
process on loopback, started once per test module and stopped by its PID."""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.services import IN_CI

HARNESS = Path(__file__).resolve().parents[2] / "oidc_provider"
READY_TIMEOUT_SECONDS = 30.0
CLIENT_ID = "modelgate"
CLIENT_SECRET = "modelgate-test-secret"
# The harness registers a second client, authenticating with client_secret_post.
POST_CLIENT_ID = f"{CLIENT_ID}-post"


def require_node_harness() -> str:
    """The node executable; skips locally (fails under CI=true) when node or the harness is missing."""
    node = shutil.which("node")
    problem = None
    if node is None:
        problem = "node is not on PATH"
    elif shutil.which("npm") is None:
        problem = "npm is not on PATH"
    elif not (HARNESS / "node_modules" / "oidc-provider" / "package.json").is_file():
        problem = f"{HARNESS}/node_modules is missing: run `npm ci --prefix tests/oidc_provider`"
    if problem is not None:
        message = f"the OpenID provider harness cannot run: {problem}"
        if IN_CI:
            pytest.fail(f"{message} (CI=true: SSO tests must run)")
        pytest.skip(message)
    assert node is not None
    return node


@dataclass
class NodeIdp:
    """A running harness: its issuer URL and the process to stop."""

    issuer: str
    process: subprocess.Popen[str]
    log_path: Path

    def rotate_keys(self) -> str:
        """Replace the signing key; returns the new key id."""
        reply = httpx.post(f"{self.issuer}/__test/rotate-keys", timeout=10)
        reply.raise_for_status()
        return reply.json()["kid"]

    def log(self) -> str:
        """What the provider wrote to stderr (warnings, server errors)."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        """Terminate the process by its PID, killing it when it does not exit in time."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log_path.unlink(missing_ok=True)


def start_node_idp(node: str, redirect_uri: str) -> NodeIdp:
    """Start the harness for one redirect URI and wait (bounded) for its "ready <issuer>" line."""
    fd, log_name = tempfile.mkstemp(prefix="oidc-provider-", suffix=".log")
    log_path = Path(log_name)
    with os.fdopen(fd, "w") as log_file:
        process = subprocess.Popen(
            [
                node,
                "server.mjs",
                "--port",
                "0",
                "--redirect-uri",
                redirect_uri,
                "--client-id",
                CLIENT_ID,
                "--client-secret",
                CLIENT_SECRET,
            ],
            cwd=HARNESS,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
        )
    lines: queue.Queue[str] = queue.Queue()

    def read_stdout() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.strip())

    threading.Thread(target=read_stdout, name="oidc-provider-stdout", daemon=True).start()
    idp = NodeIdp("", process, log_path)
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline and process.poll() is None:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        if line.startswith("ready "):
            idp.issuer = line.removeprefix("ready ")
            return idp
    output = idp.log()
    idp.stop()
    raise RuntimeError(f"the OpenID provider did not get ready within {READY_TIMEOUT_SECONDS:g} s: {output}")
