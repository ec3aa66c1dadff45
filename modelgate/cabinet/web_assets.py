"""The web cabinet's files: `GET /` answers `index.html`, `GET /assets/<path>` every other file of
`modelgate/cabinet/web/` (shipped as package data), all read once when the app is built.

Only the files found then are served, looked up by name in a table: no request path ever reaches the file
system, so `..`, encoded or not, can only miss (404). Every answer carries the security headers of
`modelgate/cabinet/web_security.py`.

Caching: the files keep fixed names (there is no build step to put a hash in them), and the ES modules import
each other by those names, so a browser holding some modules of the previous release for an hour could run a
mix of two releases. Every answer is therefore `Cache-Control: no-cache` with a strong ETag: the browser asks
each time, and an unchanged file costs a 304 without a body.

Module preload: a browser finds an ES module's imports only once it has the module, so the app's ~20 modules
would be fetched (or revalidated) in as many rounds as the import tree is deep. When the page is served, the
`<!-- modulepreload -->` line of `index.html` is replaced by a `<link rel="modulepreload">` for every module
`app.js` imports, directly or not (read from the modules' `import … from "./x.js"` lines when the app is
built), so all of them are asked for at once.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

import orjson
from aiohttp import web

from modelgate.cabinet.web_security import SECURITY_HEADERS

INDEX = "index.html"
ASSETS_PREFIX = "/assets/"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".webp": "image/webp",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
    ".woff2": "font/woff2",
}
APP_MODULE = "app.js"
PRELOAD_MARKER = b"<!-- modulepreload -->"
# A static import or re-export of a relative module: `import "./x.js"`, `… from "../y.js"`.
_RELATIVE_IMPORT = re.compile(rb"""(?:\bimport|\bfrom)\s*["'](\.{1,2}/[^"'\s]+\.js)["']""")
_READ_METHODS = ("GET", "HEAD")
_CACHE_CONTROL = "no-cache"


@dataclass(frozen=True, slots=True)
class WebAsset:
    """One file as it is served."""

    body: bytes
    content_type: str
    etag: str  # quoted, strong


def _asset(body: bytes, content_type: str) -> WebAsset:
    return WebAsset(body, content_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


def imported_modules(sources: Mapping[str, bytes], entry: str = APP_MODULE) -> list[str]:
    """Every module `entry` imports, directly or through others (names relative to the web folder), in the
    order they are first reached; `entry` itself is not listed. An import of a missing file is skipped."""
    seen: dict[str, None] = {}
    pending = [entry]
    while pending:
        name = pending.pop(0)
        folder = posixpath.dirname(name)
        for target in _RELATIVE_IMPORT.findall(sources.get(name, b"")):
            resolved = posixpath.normpath(posixpath.join(folder, target.decode()))
            if resolved != entry and resolved not in seen and resolved in sources:
                seen[resolved] = None
                pending.append(resolved)
    return list(seen)


def with_module_preloads(index: bytes, modules: list[str]) -> bytes:
    """`index.html` with its `<!-- modulepreload -->` line replaced by a preload link per module."""
    links = "\n  ".join(f'<link rel="modulepreload" href="{ASSETS_PREFIX}{name}">' for name in modules)
    return index.replace(PRELOAD_MARKER, links.encode(), 1)


def _files_under(folder: Traversable, prefix: str = "") -> Iterator[tuple[str, Traversable]]:
    for entry in folder.iterdir():
        if entry.name.startswith((".", "_")):  # hidden files, __pycache__
            continue
        if entry.is_dir():
            yield from _files_under(entry, f"{prefix}{entry.name}/")
        elif entry.is_file():
            yield prefix + entry.name, entry


class WebAssets:
    """The web cabinet's files by their path under `modelgate/cabinet/web/`, with content type and ETag."""

    def __init__(self, assets: Mapping[str, WebAsset]) -> None:
        self._assets = dict(assets)

    @classmethod
    def load(cls, folder: Traversable | None = None) -> WebAssets:
        """Read every file of a known type under `folder` (the packaged `modelgate/cabinet/web/` by
        default)."""
        folder = folder if folder is not None else files("modelgate.cabinet") / "web"
        if not folder.is_dir():
            return cls({})
        bodies: dict[str, tuple[bytes, str]] = {}
        for name, entry in _files_under(folder):
            content_type = CONTENT_TYPES.get("." + name.rpartition(".")[2].lower())
            if content_type is not None:
                bodies[name] = (entry.read_bytes(), content_type)
        if INDEX in bodies:
            scripts = {name: body for name, (body, _) in bodies.items() if name.endswith(".js")}
            index, content_type = bodies[INDEX]
            bodies[INDEX] = (with_module_preloads(index, imported_modules(scripts)), content_type)
        return cls({name: _asset(body, content_type) for name, (body, content_type) in bodies.items()})

    def get(self, name: str) -> WebAsset | None:
        """The file at `name` (a path relative to `modelgate/cabinet/web/`), or None."""
        return self._assets.get(name)

    @property
    def names(self) -> list[str]:
        """Every served file, sorted."""
        return sorted(self._assets)

    async def serve_index(self, request: web.Request) -> web.Response:
        """`/`: the app's page."""
        return _answer(request, self.get(INDEX))

    async def serve_file(self, request: web.Request) -> web.Response:
        """`/assets/<path>`: any other file."""
        name = request.match_info["path"]
        return _answer(request, None if name == INDEX else self.get(name))


def _with_security_headers(response: web.Response) -> web.Response:
    response.headers.update(SECURITY_HEADERS)
    return response


def _refusal(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    response = web.Response(
        status=status, body=orjson.dumps({"error": message}), content_type="application/json"
    )
    response.headers["Cache-Control"] = "no-store"
    if headers:
        response.headers.update(headers)
    return _with_security_headers(response)


def _answer(request: web.Request, asset: WebAsset | None) -> web.Response:
    if request.method not in _READ_METHODS:
        return _refusal(405, "method not allowed", {"Allow": ", ".join(_READ_METHODS)})
    if asset is None:
        return _refusal(404, "not found")
    headers = {"ETag": asset.etag, "Cache-Control": _CACHE_CONTROL}
    if asset.etag in request.headers.get("If-None-Match", ""):
        return _with_security_headers(web.Response(status=304, headers=headers))
    response = web.Response(body=asset.body, headers=headers)
    response.content_type = asset.content_type.partition(";")[0]
    if "charset=" in asset.content_type:
        response.charset = asset.content_type.rpartition("=")[2]
    return _with_security_headers(response)


def add_web_routes(router: web.UrlDispatcher, assets: WebAssets) -> None:
    """Serve `assets`: `/` is `index.html`, `/assets/<path>` the other files (any method is answered here,
    so even a 405 carries the security headers)."""
    router.add_route("*", "/", assets.serve_index)
    router.add_route("*", ASSETS_PREFIX + "{path:.+}", assets.serve_file)
