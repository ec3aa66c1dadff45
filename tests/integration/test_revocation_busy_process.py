"""Issue 33, finding 3: on PostgreSQL alone (no Redis), a key revoked through one gateway process must be
refused by another process on the very next request even while that process is kept busy by other
clients: the revoke answers only once every live process acted on it (docs/architecture.md, "Revocation
without Redis"). Two real gateway processes on a throwaway database."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.integration.test_revocation_across_processes import _config
from tests.support.gateway import GatewayProcess, Tenant, register_tenant

ROUNDS = 200
BUSY_CLIENTS = 8
_CHAT = {"model": "mock-chat", "messages": [{"role": "user", "content": "busy " * 400}]}


@contextmanager
def _kept_busy(base_url: str, api_key: str, clients: int = BUSY_CLIENTS) -> Iterator[list[int]]:
    """`clients` threads sending chats to `base_url` without pause until the block ends; yields the
    count of answers each received (so the test can tell the load was real)."""
    stop = threading.Event()
    served = [0] * clients

    def keep_busy(index: int) -> None:
        with httpx.Client(timeout=30, headers={"authorization": f"Bearer {api_key}"}) as client:
            while not stop.is_set():
                client.post(f"{base_url}/v1/chat/completions", json=_CHAT)
                served[index] += 1

    threads = [threading.Thread(target=keep_busy, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield served
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)


def _revocation_rounds(
    first: GatewayProcess, busy: GatewayProcess, tenant: Tenant
) -> tuple[int, list[float]]:
    """(keys still accepted by the busy process right after their revoke answered, revoke latencies)."""
    accepted = 0
    latencies: list[float] = []
    session = {"authorization": f"Bearer {tenant.session_token}"}
    keys_url = f"{first.base_url}/api/organization/api-keys"
    chat_url = f"{busy.base_url}/v1/chat/completions"
    chat = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=30) as cabinet, httpx.Client(timeout=30) as model_api:
        for round_number in range(ROUNDS):
            created = cabinet.post(keys_url, json={"alias": f"k{round_number}"}, headers=session)
            assert created.status_code == 201, created.text
            key_id, secret = created.json()["id"], created.json()["secret"]
            use = {"authorization": f"Bearer {secret}"}
            # The busy process caches the key, then the other revokes it.
            assert model_api.post(chat_url, json=chat, headers=use).status_code == 200
            started = time.perf_counter()
            revoked = cabinet.post(f"{keys_url}/{key_id}/revoke", headers=session)
            latencies.append(time.perf_counter() - started)
            assert revoked.status_code == 200, revoked.text
            after = model_api.post(chat_url, json=chat, headers=use)
            accepted += after.status_code != 401
    return accepted, sorted(latencies)


def test_a_key_revoked_on_one_process_is_refused_at_once_by_another_kept_busy_without_redis(
    tmp_path: Path, fresh_pg_url: str
) -> None:
    config = _config(tmp_path, fresh_pg_url)
    with GatewayProcess(config, cwd=tmp_path) as first, GatewayProcess(config, cwd=tmp_path) as busy:
        tenant = register_tenant(first.base_url)
        with _kept_busy(busy.base_url, tenant.api_key) as served:
            accepted, latencies = _revocation_rounds(first, busy, tenant)
        p50, p99 = latencies[ROUNDS // 2] * 1000, latencies[ROUNDS * 99 // 100] * 1000
        print(
            f"\n{accepted} of {ROUNDS} revoked keys accepted by the busy process ({sum(served)} busy chats);"
            f" revoke p50 {p50:.1f} ms, p99 {p99:.1f} ms"
        )
        assert sum(served) > ROUNDS  # the other process really was busy
        assert accepted == 0
