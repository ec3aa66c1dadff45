"""A steady load of chat requests from a client thread, for tests that break something under load."""

from __future__ import annotations

import threading

import httpx


class ChatLoad:
    """Chat requests to the model `metered`, one after another from a thread, until stopped (or `limit` are
    sent): the ids of those answered 200 in `served`, the others' statuses in `refused`."""

    def __init__(self, base_url: str, api_key: str, limit: int = 5_000) -> None:
        self.served: list[str] = []
        self.refused: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(base_url, api_key, limit), name="load")

    def _run(self, base_url: str, api_key: str, limit: int) -> None:
        with httpx.Client(base_url=base_url, timeout=30) as client:
            for n in range(limit):
                if self._stop.is_set():
                    return
                reply = client.post(
                    "/v1/chat/completions",
                    headers={"authorization": f"Bearer {api_key}"},
                    json={"model": "metered", "messages": [{"role": "user", "content": f"n {n}"}]},
                )
                if reply.status_code == 200:
                    self.served.append(reply.headers["x-request-id"])
                else:
                    self.refused.append(reply.status_code)

    def __enter__(self) -> ChatLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
