"""The model API's route table: which paths exist, what they route on, their body limits and envelope.

Anything under /v1 that is not in this table answers 404 `route not supported` (envelope A).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from modelgate.domain.media import MediaKind
from modelgate.domain.usage import ANY_FINAL_EVENT, MESSAGE_STOP, OPENAI_DONE, RESPONSE_DONE
from modelgate.proxy.pipeline.envelopes import Envelope

MiB = 1024 * 1024


class BodyFormat(Enum):
    """How a route's request body arrives."""

    NONE = "none"
    JSON = "json"
    MULTIPART = "multipart"
    JSON_OR_MULTIPART = "json_or_multipart"


@dataclass(frozen=True, slots=True)
class BodyLimit:
    """The spec's body limits for one route group (bytes)."""

    json: int = 4 * MiB
    multipart: int = 0
    part: int = 0


JSON_4MIB = BodyLimit()
IMAGES_MULTIPART = BodyLimit(json=4 * MiB, multipart=32 * MiB, part=25 * MiB)
AUDIO_MULTIPART = BodyLimit(json=4 * MiB, multipart=25 * MiB, part=25 * MiB)
VIDEOS = BodyLimit(json=4 * MiB, multipart=100 * MiB, part=100 * MiB)
REALTIME_JSON = BodyLimit(json=1 * MiB)
NO_BODY = BodyLimit(json=64 * 1024)


@dataclass(frozen=True, slots=True)
class CapRule:
    """Where a route's body carries its output cap and how many answers it asks for."""

    fields: tuple[str, ...]  # every cap field the route accepts; the first is the one the gateway fills in
    choices: tuple[str, ...] = ()  # fields that multiply the allowance (n, best_of)
    default: int | None = None  # None: the model's default_max_tokens


LEGACY_COMPLETIONS_DEFAULT = 16  # the OpenAI default of legacy completions' max_tokens


@dataclass(frozen=True, slots=True)
class Route:
    """One model API endpoint, and everything the steps of the chain do differently for it."""

    name: str
    method: str
    path: str
    kind: str | None  # the request kind a model must serve; None for routes that name no model
    body: BodyFormat
    limit: BodyLimit
    upstream_path: str
    envelope: Envelope = Envelope.A
    # GET /v1/models switches to envelope B with the vendor version header, but a wrong key stays in A.
    envelope_b_with_version_header: bool = False
    streams: bool = False
    has_id: bool = False  # the last path segment is an object id (responses/{id}, models/{id})
    # Generates nothing (retrieving or deleting a stored object, counting tokens, minting a realtime
    # secret): nothing is reserved for the call and nothing is charged.
    free: bool = False
    media: MediaKind | None = None  # charged per image, audio or video second, or request; never by tokens
    cap: CapRule | None = None  # where the body names its output cap (filled in when it names none)
    final_events: tuple[bytes, ...] = ANY_FINAL_EVENT  # the events that end a complete stream of it
    # An OpenAI-style stream that reports usage only when asked (`stream_options.include_usage`).
    usage_on_request: bool = False
    provider_priced: bool = False  # OpenAI-style answers that some providers price (`cost`)
    creates: str | None = None  # the kind of object a call makes ("response", "video"), bound to its row
    deletes: bool = False  # deletes the object it names
    counts_tokens: bool = False  # the Messages token count: native rows only
    mints_realtime_secret: bool = False
    websocket: bool = False  # the realtime WebSocket upgrade


def _post(
    name: str,
    path: str,
    kind: str,
    body: BodyFormat = BodyFormat.JSON,
    limit: BodyLimit = JSON_4MIB,
    **fields: Any,
) -> Route:
    return Route(name, "POST", path, kind, body, limit, path, **fields)


def _object(name: str, method: str, path: str, kind: str, **fields: Any) -> Route:
    """A follow-up on an object the model API created (`{id}` in the path)."""
    return Route(name, method, path, kind, BodyFormat.NONE, NO_BODY, path, has_id=True, **fields)


ROUTES: tuple[Route, ...] = (
    _post(
        "chat_completions",
        "/v1/chat/completions",
        "chat",
        streams=True,
        cap=CapRule(("max_completion_tokens", "max_tokens"), ("n",)),
        final_events=OPENAI_DONE,
        usage_on_request=True,
        provider_priced=True,
    ),
    _post(
        "completions",
        "/v1/completions",
        "completions",
        streams=True,
        cap=CapRule(("max_tokens",), ("n", "best_of"), LEGACY_COMPLETIONS_DEFAULT),
        final_events=OPENAI_DONE,
        usage_on_request=True,
        provider_priced=True,
    ),
    _post("embeddings", "/v1/embeddings", "embeddings", provider_priced=True),
    _post(
        "responses",
        "/v1/responses",
        "responses",
        streams=True,
        cap=CapRule(("max_output_tokens",)),
        final_events=RESPONSE_DONE,
        creates="response",
    ),
    _object("responses_get", "GET", "/v1/responses/{id}", "responses", free=True),
    _object("responses_delete", "DELETE", "/v1/responses/{id}", "responses", free=True, deletes=True),
    _post(
        "messages",
        "/v1/messages",
        "messages",
        streams=True,
        envelope=Envelope.B,
        cap=CapRule(("max_tokens",)),
        final_events=MESSAGE_STOP,
    ),
    _post(
        "messages_count_tokens",
        "/v1/messages/count_tokens",
        "messages",
        envelope=Envelope.B,
        free=True,
        counts_tokens=True,
    ),
    Route(
        "models",
        "GET",
        "/v1/models",
        None,
        BodyFormat.NONE,
        NO_BODY,
        "/v1/models",
        envelope_b_with_version_header=True,
    ),
    Route(
        "models_get",
        "GET",
        "/v1/models/{id}",
        None,
        BodyFormat.NONE,
        NO_BODY,
        "/v1/models/{id}",
        envelope_b_with_version_header=True,
        has_id=True,
    ),
    _post("decisions", "/v1/decisions", "decisions"),
    _post("images_generations", "/v1/images/generations", "images", media=MediaKind.IMAGES),
    _post(
        "images_edits",
        "/v1/images/edits",
        "image_edits",
        BodyFormat.MULTIPART,
        IMAGES_MULTIPART,
        media=MediaKind.IMAGES,
    ),
    _post(
        "images_variations",
        "/v1/images/variations",
        "image_edits",
        BodyFormat.MULTIPART,
        IMAGES_MULTIPART,
        media=MediaKind.IMAGES,
    ),
    _post(
        "audio_transcriptions",
        "/v1/audio/transcriptions",
        "audio_transcriptions",
        BodyFormat.MULTIPART,
        AUDIO_MULTIPART,
        media=MediaKind.AUDIO_IN,
    ),
    _post(
        "audio_translations",
        "/v1/audio/translations",
        "audio_translations",
        BodyFormat.MULTIPART,
        AUDIO_MULTIPART,
        media=MediaKind.AUDIO_IN,
    ),
    _post("audio_speech", "/v1/audio/speech", "audio_speech", streams=True, media=MediaKind.SPEECH),
    _post(
        "videos_create",
        "/v1/videos",
        "videos",
        BodyFormat.JSON_OR_MULTIPART,
        VIDEOS,
        media=MediaKind.VIDEO,
        creates="video",
    ),
    # The organization's videos come from the gateway's own bindings, so the list names no model.
    Route("videos_list", "GET", "/v1/videos", None, BodyFormat.NONE, NO_BODY, "/v1/videos"),
    _object("videos_get", "GET", "/v1/videos/{id}", "videos", free=True, media=MediaKind.FOLLOW_UP),
    _object(
        "videos_delete",
        "DELETE",
        "/v1/videos/{id}",
        "videos",
        free=True,
        media=MediaKind.FOLLOW_UP,
        deletes=True,
    ),
    _object(
        "videos_content", "GET", "/v1/videos/{id}/content", "videos", free=True, media=MediaKind.FOLLOW_UP
    ),
    _post(
        "realtime_client_secrets",
        "/v1/realtime/client_secrets",
        "realtime",
        limit=REALTIME_JSON,
        free=True,
        media=MediaKind.FOLLOW_UP,
        mints_realtime_secret=True,
    ),
    # The WebSocket upgrade: `?client_secret=…&model=…`, the API key in a header.
    Route(
        "realtime",
        "GET",
        "/v1/realtime",
        "realtime",
        BodyFormat.NONE,
        NO_BODY,
        "/v1/realtime",
        websocket=True,
    ),
)


class RouteTable:
    """Exact paths first, then `{id}` routes by their prefix (and suffix, e.g. `/content`); built once."""

    __slots__ = ("_by_prefix", "_exact", "_with_suffix")

    def __init__(self, routes: tuple[Route, ...] = ROUTES) -> None:
        self._exact: dict[tuple[str, str], Route] = {}
        self._by_prefix: dict[tuple[str, str], Route] = {}
        self._with_suffix: list[tuple[str, str, str, Route]] = []
        for route in routes:
            if route.has_id:
                prefix, _, suffix = route.path.partition("{id}")
                if suffix:
                    self._with_suffix.append((route.method, prefix, suffix, route))
                else:
                    self._by_prefix[(route.method, prefix)] = route
            else:
                self._exact[(route.method, route.path)] = route

    def match(self, method: str, path: str) -> tuple[Route | None, str | None]:
        """(route, object id); (None, None) for anything outside the model API reference."""
        path = path.rstrip("/") or "/"
        route = self._exact.get((method, path))
        if route is not None:
            return route, None
        prefix, _, object_id = path.rpartition("/")
        if object_id:
            route = self._by_prefix.get((method, prefix + "/"))
            if route is not None:
                return route, object_id
        for route_method, prefix, suffix, route in self._with_suffix:
            if method == route_method and path.startswith(prefix) and path.endswith(suffix):
                object_id = path[len(prefix) : -len(suffix)]
                if object_id and "/" not in object_id:
                    return route, object_id
        return None, None
