"""The web cabinet's files on the real gateway: `/` and `/assets/*` byte for byte from the packaged
`modelgate/cabinet/web/`, with their content types, revalidation by ETag, HEAD, the security headers on every
answer, and nothing outside the folder reachable however the path is spelled."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from modelgate.cabinet.web_assets import WebAssets, add_web_routes
from tests.integration.cabinet.test_web_session import web_gateway_config
from tests.support.gateway import ThreadedGateway
from tests.support.raw_http import exchange

WEB = Path(__file__).resolve().parents[3] / "modelgate" / "cabinet" / "web"
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self';"
    " img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none';"
    " form-action 'self'; frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
}
EXPECTED_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
SHIPPED = sorted(
    p.relative_to(WEB).as_posix()
    for p in WEB.rglob("*")
    if p.is_file() and p.suffix in EXPECTED_TYPES and p.name != "index.html"
)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedGateway]:
    # The files do not touch storage: one gateway on SQLite serves the whole module.
    folder = tmp_path_factory.mktemp("web")
    with ThreadedGateway(web_gateway_config(f"sqlite:///{folder / 'm.db'}", folder)) as running:
        yield running


def assert_secured(headers: httpx.Headers | dict[str, str]) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert headers.get(name) == value, name


def test_the_root_is_the_apps_page_never_cached_without_asking(gateway: ThreadedGateway) -> None:
    reply = httpx.get(f"{gateway.base_url}/")
    before, marker, after = (WEB / "index.html").read_bytes().partition(b"<!-- modulepreload -->")

    assert reply.status_code == 200
    assert marker and reply.content.startswith(before) and reply.content.endswith(after)
    assert reply.headers["content-type"] == "text/html; charset=utf-8"
    assert reply.headers["cache-control"] == "no-cache"
    assert re.fullmatch(r'"[0-9a-f]{32}"', reply.headers["etag"])
    assert_secured(reply.headers)


def test_the_page_loads_the_app_module_and_the_stylesheet_it_names(gateway: ThreadedGateway) -> None:
    page = httpx.get(f"{gateway.base_url}/").text
    referenced = re.findall(r'(?:src|href)="(/assets/[^"]+)"', page)

    assert "/assets/app.js" in referenced and "/assets/styles.css" in referenced
    for path in referenced:
        assert httpx.get(f"{gateway.base_url}{path}").status_code == 200, path


def test_the_page_preloads_every_module_of_the_app_so_a_reload_asks_for_them_at_once(
    gateway: ThreadedGateway,
) -> None:
    page = httpx.get(f"{gateway.base_url}/").text
    preloaded = re.findall(r'<link rel="modulepreload" href="/assets/([^"]+)">', page)
    modules = sorted(name for name in SHIPPED if name.endswith(".js") and name != "app.js")

    # Every module of the folder is reached from app.js (a module nothing imports would be dead code), once.
    assert sorted(preloaded) == modules
    assert len(set(preloaded)) == len(preloaded)
    assert "<!-- modulepreload -->" not in page


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_file_is_served_with_its_type_and_the_security_headers(
    gateway: ThreadedGateway, name: str
) -> None:
    reply = httpx.get(f"{gateway.base_url}/assets/{name}")

    assert reply.status_code == 200
    assert reply.content == (WEB / name).read_bytes()
    assert reply.headers["content-type"] == EXPECTED_TYPES[Path(name).suffix]
    assert reply.headers["cache-control"] == "no-cache"
    assert_secured(reply.headers)


def test_an_unchanged_file_is_revalidated_with_a_304(gateway: ThreadedGateway) -> None:
    first = httpx.get(f"{gateway.base_url}/assets/app.js")

    again = httpx.get(f"{gateway.base_url}/assets/app.js", headers={"If-None-Match": first.headers["etag"]})
    stale = httpx.get(f"{gateway.base_url}/assets/app.js", headers={"If-None-Match": '"0123"'})

    assert (again.status_code, again.content) == (304, b"")
    assert again.headers["etag"] == first.headers["etag"]
    assert_secured(again.headers)
    assert stale.status_code == 200 and stale.content == first.content


def test_head_answers_the_headers_without_the_body(gateway: ThreadedGateway) -> None:
    for path in ("/", "/assets/styles.css"):
        reply = httpx.head(f"{gateway.base_url}{path}")

        assert reply.status_code == 200
        assert reply.content == b""
        assert int(reply.headers["content-length"]) == len(httpx.get(f"{gateway.base_url}{path}").content)
        assert_secured(reply.headers)


@pytest.mark.parametrize("path", ["/assets/nothing.js", "/assets/pages/nothing.js", "/assets/index.html"])
def test_an_unknown_file_is_404_with_the_security_headers(gateway: ThreadedGateway, path: str) -> None:
    reply = httpx.get(f"{gateway.base_url}{path}")

    assert (reply.status_code, reply.json()) == (404, {"error": "not found"})
    assert_secured(reply.headers)


def test_other_methods_are_405_with_the_security_headers(gateway: ThreadedGateway) -> None:
    for path in ("/", "/assets/app.js"):
        reply = httpx.post(f"{gateway.base_url}{path}", content=b"x")

        assert reply.status_code == 405
        assert reply.headers["allow"] == "GET, HEAD"
        assert_secured(reply.headers)


@pytest.mark.parametrize(
    "target",
    [
        "/assets/../server.py",
        "/assets/../../modelgate/server.py",
        "/assets/..%2fweb_assets.py",
        "/assets/%2e%2e/web_assets.py",
        "/assets/%2e%2e%2f%2e%2e%2fpyproject.toml",
        "/assets/..%5cweb_assets.py",
        "/assets/pages/../../web_assets.py",
        "/assets//etc/passwd",
        "/assets/%2fetc%2fpasswd",
        "/assets/....//web_assets.py",
        "/assets/web_assets.py",
        "/assets/__init__.py",
    ],
)
def test_nothing_outside_the_web_folder_is_reachable(gateway: ThreadedGateway, target: str) -> None:
    request = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()

    answer, _ = exchange(gateway.port, request)

    assert answer.status == 404, target
    assert b"import" not in answer.body and b"root:" not in answer.body


def test_the_model_api_is_not_shadowed(gateway: ThreadedGateway) -> None:
    reply = httpx.get(f"{gateway.base_url}/v1/models")

    assert reply.status_code == 401
    assert "content-security-policy" not in reply.headers


async def test_a_folder_is_served_by_extension_and_skips_hidden_and_unknown_files(
    aiohttp_client, tmp_path: Path
) -> None:
    (tmp_path / "index.html").write_text("<!doctype html><title>t</title>")
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "logo.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    (tmp_path / "img" / "mark.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (tmp_path / ".env").write_text("SECRET=1")
    (tmp_path / "notes.md").write_text("# notes")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.js").write_text("1")
    assets = WebAssets.load(tmp_path)
    app = web.Application()
    add_web_routes(app.router, assets)
    client = await aiohttp_client(app)

    svg = await client.get("/assets/img/logo.svg")
    png = await client.get("/assets/img/mark.png")

    assert assets.names == ["img/logo.svg", "img/mark.png", "index.html"]
    assert (svg.status, svg.headers["Content-Type"]) == (200, "image/svg+xml")
    assert (png.status, png.headers["Content-Type"], await png.read()) == (
        200,
        "image/png",
        b"\x89PNG\r\n\x1a\n",
    )
    for hidden in ("/assets/.env", "/assets/notes.md", "/assets/__pycache__/x.js"):
        assert (await client.get(hidden)).status == 404, hidden
