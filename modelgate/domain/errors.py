"""The typed gateway errors: each knows its HTTP status and its type/code in both envelopes.

Plugins and the forwarder raise these; `proxy.pipeline.envelopes` is the one place that renders them.
"""

from __future__ import annotations

from collections.abc import Mapping


class GatewayError(Exception):
    """A failure answered to the client in envelope A or B."""

    status: int = 500
    type_a: str = "server_error"
    code: str | None = None
    type_b: str = "api_error"
    # The spec keeps some errors in envelope A even on routes that otherwise answer in envelope B.
    always_envelope_a: bool = False

    def __init__(self, message: str, *, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = dict(headers) if headers else {}


class InvalidRequest(GatewayError):
    """400: invalid parameters."""

    status, type_a, type_b = 400, "invalid_request_error", "invalid_request_error"


class InvalidProviderObject(InvalidRequest):
    """400 about the request's `provider` object; envelope A even on /v1/messages."""

    always_envelope_a = True


class AuthenticationFailed(GatewayError):
    """401: wrong or missing API key."""

    status, type_a, type_b = 401, "invalid_request_error", "authentication_error"


class AuthenticationFailedEnvelopeA(AuthenticationFailed):
    """401 on GET /v1/models: a wrong key stays in envelope A even with the version header."""

    always_envelope_a = True


class InsufficientBalance(GatewayError):
    """402: balance or budget insufficient."""

    status, type_a, code, type_b = 402, "insufficient_quota", "insufficient_balance", "invalid_request_error"


class PolicyBlocked(GatewayError):
    """403: a policy rule blocks the request."""

    status, type_a, type_b = 403, "invalid_request_error", "permission_error"


class ModelNotFound(GatewayError):
    """404: model unknown, not enabled for the key, or not serving this request kind."""

    status, type_a, code, type_b = 404, "invalid_request_error", "model_not_found", "not_found_error"


class InvalidRealtimeCredential(GatewayError):
    """404: realtime client secret missing, unknown, used, expired or foreign."""

    status, type_a, code, type_b = (
        404,
        "invalid_request_error",
        "invalid_realtime_credential",
        "not_found_error",
    )


class RouteNotSupported(GatewayError):
    """404: a path outside the model API reference."""

    status, type_a, type_b = 404, "invalid_request_error", "not_found_error"

    def __init__(self) -> None:
        super().__init__("route not supported")


class UnknownTask(GatewayError):
    """404: an unknown (or another organization's) task identifier."""

    status, type_a, type_b = 404, "invalid_request_error", "not_found_error"


class RequestInProgress(GatewayError):
    """409: a second in-flight request claims the same internal request id."""

    status, type_a, code, type_b = (
        409,
        "invalid_request_error",
        "request_in_progress",
        "invalid_request_error",
    )


class RequestTooLarge(GatewayError):
    """413: the body, or one multipart part, is larger than the route group allows."""

    status, type_a, code, type_b = 413, "invalid_request_error", "request_too_large", "request_too_large"


class UnsupportedMediaType(GatewayError):
    """415: a request body in a content coding the gateway does not decode."""

    status, type_a, type_b = 415, "invalid_request_error", "invalid_request_error"


class RateLimited(GatewayError):
    """429: RPM/TPM exceeded or the realtime concurrency cap reached."""

    status, type_a, code, type_b = 429, "rate_limit_error", "rate_limit_exceeded", "rate_limit_error"


# What tenants are told when providers fail: never which provider, host or row, nor the exception (those go
# to the operator's log, one warning line per failed attempt).
UPSTREAM_UNAVAILABLE_MESSAGE = "The model is temporarily unavailable; try again later."
SERVICE_UNAVAILABLE_MESSAGE = "The model service is temporarily unavailable; try again shortly."


class UpstreamUnavailable(GatewayError):
    """502: the provider failed or timed out and no other row could serve."""

    status, type_a, code, type_b = 502, "server_error", "upstream_unavailable", "api_error"

    def __init__(self, message: str = UPSTREAM_UNAVAILABLE_MESSAGE) -> None:
        super().__init__(message)


class ServiceUnavailable(GatewayError):
    """503: no healthy row is left for the model, or no capacity to reach one."""

    status, type_a, code, type_b = 503, "server_error", "upstream_unavailable", "api_error"

    def __init__(
        self, message: str = SERVICE_UNAVAILABLE_MESSAGE, *, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message, headers=headers)


# A key or policy the gateway must read from its database, which cannot be reached (and nothing known before
# may serve: `[storage] serve_cached_during_outage`).
STORAGE_UNAVAILABLE = "The gateway cannot reach its database right now; try again shortly."
STORAGE_RETRY_AFTER = {"retry-after": "1"}


class Overloaded(ServiceUnavailable):
    """503 at once: the process has `server.max_open_requests` open; another process or later has room."""

    def __init__(self, cap: int) -> None:
        super().__init__(
            f"The gateway is at capacity ({cap} open requests); try again shortly.",
            headers={"retry-after": "1"},
        )


class UpstreamClientError(GatewayError):
    """An upstream 4xx that is the client's fault, passed on with its status and message."""

    type_a = type_b = "invalid_request_error"

    def __init__(
        self, status: int, message: str, *, type_a: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        if type_a:
            self.type_a = type_a
        self.type_b = _B_TYPE_BY_STATUS.get(status, "invalid_request_error")


_B_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "invalid_request_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}


class InternalError(GatewayError):
    """500: a bug. The message is generic; the details go to the log, never to the client."""

    def __init__(self) -> None:
        super().__init__("internal error")
