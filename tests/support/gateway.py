"""Run the real gateway on a loopback port for a test: in a thread with its own event loop, or as a
subprocess of the real `modelgate` command (for signals and multi-process tests)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from modelgate.config import Config, load_config
from modelgate.plugins import chain_plugins
from modelgate.server import serve

# Where each running test gateway keeps its data, so tenants can be funded like an operator would.
_STORAGE_BY_BASE_URL: dict[str, str] = {}


def write_config(path: Path, toml: str, env: dict[str, str] | None = None) -> Config:
    """Write a TOML config and load it through the real loader, as `modelgate serve` does (with the chain's
    plugins, which `plugins.disabled` is checked against)."""
    path.write_text(toml, encoding="utf-8")
    return load_config(path, env=env or {}, chain=chain_plugins())


class ThreadedGateway:
    """The gateway's `serve()` running in a background thread on a free loopback port."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.storage_url = config.storage.url
        _STORAGE_BY_BASE_URL[self.base_url] = self.storage_url
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="gateway", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            ready = asyncio.Event()
            server = asyncio.create_task(
                serve(
                    self.config,
                    host="127.0.0.1",
                    port=self.port,
                    ready=ready,
                    stop=self._stop,
                    sock=self._sock,
                )
            )
            waiter = asyncio.create_task(ready.wait())
            await asyncio.wait({server, waiter}, return_when=asyncio.FIRST_COMPLETED)
            self._ready.set()
            await server

        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced to the test thread by start()/stop()
            self._error = exc
            self._ready.set()

    def start(self) -> ThreadedGateway:
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("gateway did not start within 30 s")
        if self._error is not None:
            raise RuntimeError(f"gateway failed to start: {self._error!r}") from self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=60)
        if self._thread.is_alive():
            raise RuntimeError("gateway did not stop within 60 s")

    def __enter__(self) -> ThreadedGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class GatewayProcess:
    """`modelgate serve` as a child process; stopped with SIGTERM like a real deployment."""

    def __init__(
        self,
        config_path: Path,
        *,
        workers: int = 1,
        port: int | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._args = [
            sys.executable,
            "-m",
            "modelgate",
            "serve",
            "--config",
            str(config_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(workers),
        ]
        self._env = {**os.environ, **(env or {})}
        self._cwd = cwd
        self.storage_url = load_config(config_path, env=self._env).storage.url
        if self.storage_url.startswith("sqlite:///") and not Path(self.storage_url[10:]).is_absolute():
            self.storage_url = f"sqlite:///{(cwd or Path.cwd()) / self.storage_url[10:]}"
        _STORAGE_BY_BASE_URL[self.base_url] = self.storage_url
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0, *, ready: int = 200) -> GatewayProcess:
        """Start it and wait until /readyz answers `ready` (503: serving, but a dependency is down)."""
        # A file, not a pipe: a chatty gateway must never block on a pipe nobody reads until it exits.
        log_dir = self._cwd or Path(tempfile.gettempdir())
        self._log_path = log_dir / f"modelgate-{self.port}.log"
        self._log = self._log_path.open("wb")
        self.process = subprocess.Popen(
            self._args, env=self._env, cwd=self._cwd, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.process.returncode}: {self.output()}")
            try:
                if httpx.get(f"{self.base_url}/readyz", timeout=5).status_code == ready:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)  # polling a starting process; bounded by the deadline
        self.kill()
        raise RuntimeError("gateway did not become ready in time")

    def terminate(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 60.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def output(self) -> str:
        """Everything the process wrote so far (stdout and stderr)."""
        if self.process is None:
            return ""
        return self._log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        """SIGTERM, as a deployment stops it; killed if it has not exited within 30 s."""
        self.terminate()
        try:
            self.wait(timeout=30)
        finally:
            self.kill()

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True, slots=True)
class Tenant:
    """An organization registered through the cabinet, with its owner's session and one API key."""

    email: str
    session_token: str
    api_key: str
    key_id: str


def register_tenant(
    base_url: str, *, plan: str = "free", email: str | None = None, fund_usd: float | None = 1000.0
) -> Tenant:
    """Register an organization and issue an API key through the real cabinet API; unless `fund_usd` is
    None, its first invoice is then paid and the balance credited with `fund_usd`."""
    email = email or f"owner-{os.urandom(6).hex()}@example.com"
    with httpx.Client(base_url=base_url, timeout=30) as client:
        reply = client.post(
            "/api/auth/register",
            json={
                "legalName": "Test Org",
                "email": email,
                "password": "correct horse battery",
                "planCode": plan,
            },
        )
        assert reply.status_code == 201, reply.text
        token = reply.json()["token"]
        key = client.post(
            "/api/organization/api-keys",
            json={"alias": f"key-{os.urandom(4).hex()}"},
            headers={"authorization": f"Bearer {token}"},
        )
        assert key.status_code == 201, key.text
    if fund_usd is not None:
        asyncio.run(fund_organization(_STORAGE_BY_BASE_URL[base_url], email, fund_usd))
    return Tenant(email, token, key.json()["secret"], key.json()["id"])


def add_budget(base_url: str, tenant: Tenant, amount_micros: int) -> str:
    """Give the tenant's organization a daily budget (a policy rule through the cabinet API); its rule id."""
    reply = httpx.post(
        f"{base_url}/api/policy-rules",
        json={
            "subjectType": "organization",
            "effect": "allow",
            "models": ["*"],
            "budget": {"amountMicros": amount_micros, "period": "day"},
        },
        headers={"authorization": f"Bearer {tenant.session_token}"},
        timeout=30,
    )
    assert reply.status_code == 201, reply.text
    return reply.json()["id"]


async def fund_organization(storage_url: str, owner_email: str, usd: float) -> None:
    """Pay the organization's open invoices and credit its balance, straight in storage.

    Used before the organization's first model request, so no gateway holds a counter for it yet.
    """
    from modelgate.storage import open_database

    db = await open_database(storage_url)
    try:
        async with db.transaction() as tx:
            org_id = await tx.fetchval("SELECT organization_id FROM users WHERE email = $1", owner_email)
            now = time.time()
            await tx.execute(
                "UPDATE invoices SET status = 'paid', paid_at = $1 WHERE organization_id = $2"
                " AND status = 'open'",
                now,
                org_id,
            )
            await tx.execute(
                "UPDATE organizations SET activated_at = $1, balance_micros = balance_micros + $2"
                " WHERE id = $3",
                now,
                round(usd * 1_000_000),
                org_id,
            )
    finally:
        await db.close()


def revoke_key(base_url: str, tenant: Tenant, key_id: str | None = None) -> httpx.Response:
    return httpx.post(
        f"{base_url}/api/organization/api-keys/{key_id or tenant.key_id}/revoke",
        headers={"authorization": f"Bearer {tenant.session_token}"},
        timeout=30,
    )
