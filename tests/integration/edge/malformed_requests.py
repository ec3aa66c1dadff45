"""A battery of requests aiohttp's parser refuses, each carrying secrets where its error would quote them."""

from __future__ import annotations

# A head over aiohttp's 8190-byte line limit.
_OVER_THE_LIMIT = 9000


def malformed_requests(api_key: str, client_secret: str, prompt: str) -> dict[str, tuple[bytes, int]]:
    """Name -> (the raw request, the status it must get). The API key, the realtime client secret and the
    prompt sit where the parser's message quotes the bytes it choked on."""
    long_prompt = (prompt * (_OVER_THE_LIMIT // len(prompt) + 1))[:_OVER_THE_LIMIT]
    auth = f"Authorization: Bearer {api_key}\r\n"
    target = f"/v1/realtime?model=realtime&client_secret={client_secret}"
    requests = {
        "control byte in a header": (
            f"GET /healthz HTTP/1.1\r\nHost: gateway\r\n{auth[:-2]}\x01\r\n\r\n",
            400,
        ),
        "folded header": (
            f"GET /healthz HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer\r\n {api_key}\r\n\r\n",
            400,
        ),
        "data after Connection: close": (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n{auth}Connection: close\r\n"
            f"Content-Length: 2\r\n\r\n{{}}{api_key} {prompt}",
            400,
        ),
        "bad chunk size": (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n{auth}Transfer-Encoding: chunked\r\n\r\n"
            f"zz\r\n{prompt}\r\n0\r\n\r\n",
            400,
        ),
        "bad method": (f"G@T {target} HTTP/1.1\r\nHost: gateway\r\n\r\n", 400),
        "control byte in the target": (f"GET {target}\x01 HTTP/1.1\r\nHost: gateway\r\n\r\n", 400),
        "request line over the limit": (f"GET {target}&p={'a' * _OVER_THE_LIMIT} HTTP/1.1\r\n\r\n", 431),
        "header over 8 KiB": (
            f"GET /healthz HTTP/1.1\r\nHost: gateway\r\n{auth}X-Prompt: {long_prompt}\r\n\r\n",
            431,
        ),
        "too many headers": (
            "GET /healthz HTTP/1.1\r\nHost: gateway\r\n"
            + "".join(f"X-{i}: {api_key}\r\n" for i in range(200))
            + "\r\n",
            431,
        ),
        "invalid header name": (f"GET /healthz HTTP/1.1\r\nHost: gateway\r\nX {api_key}: 1\r\n\r\n", 400),
        "no HTTP version": (f"GET {target}\r\n\r\n", 400),
    }
    return {name: (request.encode("utf-8"), status) for name, (request, status) in requests.items()}
