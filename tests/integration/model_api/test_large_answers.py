"""An answer larger than the upstream client's back-pressure threshold (256 KiB) leaves its kept-alive
connection fit for the next request: with one connection per provider (pool_size = 1) every request
reuses it, and each is answered at once instead of waiting out the first-byte timeout for a 502.
"""

from __future__ import annotations

from tests.integration.model_api.conftest import UPSTREAM_KEY

CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"
# Far longer than a loopback answer takes; a request stuck on a paused connection fails with 502 after it.
FIRST_BYTE_SECONDS = 2.0


def one_connection_toml(base_url: str) -> str:
    """A provider on the `alpha` fake allowed a single connection, and chat and embeddings models on it."""
    return f"""
[[providers]]
name = "solo"
kind = "openai"
base_url = "{base_url}/v1"
api_key = "{UPSTREAM_KEY}"
pool_size = 1
first_byte_timeout = {FIRST_BYTE_SECONDS}
read_timeout = {FIRST_BYTE_SECONDS}

[[models]]
name = "solo-chat"
kinds = ["chat"]
[[models.rows]]
provider = "solo"

[[models]]
name = "solo-embed"
kinds = ["embeddings"]
[[models.rows]]
provider = "solo"
"""


def _chat(text: str) -> dict:
    return {"model": "solo-chat", "messages": [{"role": "user", "content": text}]}


def test_a_large_chat_answer_leaves_its_pooled_connection_fit_for_the_next_requests(
    gateway_with, tenant_on, alpha
) -> None:
    http = tenant_on(gateway_with(extra=one_connection_toml(alpha.base_url)))
    large_text = " ".join(["w" * 299] * 1_000)  # echoed back: a 300 KB answer of 1,000 words
    large = http.post(CHAT, json=_chat(large_text))
    following = [http.post(CHAT, json=_chat(f"small {i}")) for i in range(3)]

    assert large.status_code == 200, large.text
    assert large.json()["choices"][0]["message"]["content"] == "echo: " + large_text, "answer altered"
    assert [r.status_code for r in following] == [200, 200, 200], following[-1].text
    assert [r.json()["choices"][0]["message"]["content"] for r in following] == [
        f"echo: small {i}" for i in range(3)
    ]


def test_a_large_embeddings_batch_leaves_its_pooled_connection_fit_for_the_next_requests(
    gateway_with, tenant_on, alpha
) -> None:
    http = tenant_on(gateway_with(extra=one_connection_toml(alpha.base_url)))
    batch = {"model": "solo-embed", "input": [f"text {i}" for i in range(32)], "dimensions": 1024}
    large = http.post(EMBEDDINGS, json=batch)
    following = [http.post(EMBEDDINGS, json={"model": "solo-embed", "input": f"one {i}"}) for i in range(2)]

    assert large.status_code == 200, large.text
    assert len(large.content) > 300 * 1024
    assert [len(item["embedding"]) for item in large.json()["data"]] == [1024] * 32
    assert [r.status_code for r in following] == [200, 200], following[-1].text
