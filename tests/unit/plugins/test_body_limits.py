"""Body limits: the body is read within its route group's limit, and a JSON body is parsed once."""

from __future__ import annotations

import gzip

import orjson
import pytest

from modelgate.domain.errors import InvalidRequest, RequestTooLarge
from modelgate.plugins.body_limits import BodyLimits
from modelgate.proxy.pipeline.route_table import MiB
from tests.support.plugin_context import CHAT, PluginServices, context_before, run_hook

SECRETS = "/v1/realtime/client_secrets"  # the 1 MiB JSON group


async def test_a_json_body_is_kept_and_parsed_into_the_payload(services: PluginServices) -> None:
    ctx = await context_before("body_limits", services, payload=CHAT)

    await run_hook(BodyLimits().on_request(ctx))

    assert ctx.payload == CHAT
    assert ctx.body == orjson.dumps(CHAT)
    assert ctx.upstream_body() == ctx.body  # unchanged: the client's bytes go upstream


async def test_a_declared_length_over_the_limit_is_413_before_any_byte_is_read(
    services: PluginServices,
) -> None:
    ctx = await context_before(
        "body_limits", services, path=SECRETS, body=b"{}", headers={"Content-Length": str(MiB + 1)}
    )

    with pytest.raises(RequestTooLarge) as caught:
        await run_hook(BodyLimits().on_request(ctx))

    assert (caught.value.status, caught.value.code) == (413, "request_too_large")
    assert ctx.payload is None


async def test_a_chunked_body_is_refused_once_it_passes_the_limit(services: PluginServices) -> None:
    body = b'{"model": "' + b"x" * MiB + b'"}'
    ctx = await context_before(
        "body_limits", services, path=SECRETS, body=body, headers={"Transfer-Encoding": "chunked"}
    )

    with pytest.raises(RequestTooLarge):
        await run_hook(BodyLimits().on_request(ctx))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "request body is empty"),
        (b'{"model": ', "request body is not valid JSON"),
        (b'["gpt-test"]', "request body must be a JSON object"),
    ],
    ids=["empty", "broken", "array"],
)
async def test_a_body_that_is_no_json_object_is_400(
    services: PluginServices, body: bytes, message: str
) -> None:
    ctx = await context_before("body_limits", services, body=body, headers={"Content-Length": str(len(body))})

    with pytest.raises(InvalidRequest, match=message):
        await run_hook(BodyLimits().on_request(ctx))


async def test_a_gzipped_body_is_decoded_and_parsed(services: PluginServices) -> None:
    ctx = await context_before(
        "body_limits", services, body=gzip.compress(orjson.dumps(CHAT)), headers={"Content-Encoding": "gzip"}
    )

    await run_hook(BodyLimits().on_request(ctx))

    assert ctx.payload == CHAT
    assert ctx.body == orjson.dumps(CHAT)  # the upstream gets the decoded body


async def test_a_multipart_body_is_read_only_up_to_its_model_field(services: PluginServices) -> None:
    body = (
        b"--b0undary\r\n"
        b'Content-Disposition: form-data; name="model"\r\n\r\nimage-test\r\n'
        b"--b0undary\r\n"
        b'Content-Disposition: form-data; name="image"; filename="a.png"\r\n'
        b"Content-Type: image/png\r\n\r\n" + b"\x89PNG" * 1000 + b"\r\n--b0undary--\r\n"
    )
    ctx = await context_before(
        "body_limits",
        services,
        path="/v1/images/edits",
        body=body,
        headers={"Content-Type": "multipart/form-data; boundary=b0undary"},
    )

    await run_hook(BodyLimits().on_request(ctx))

    assert ctx.payload == {"model": "image-test"}
    assert ctx.body_stream is not None  # the rest is relayed as it arrives
    assert ctx.body == b""


async def test_json_sent_to_a_multipart_route_is_400(services: PluginServices) -> None:
    ctx = await context_before(
        "body_limits", services, path="/v1/images/edits", payload={"model": "image-test"}
    )

    with pytest.raises(InvalidRequest, match="expects a multipart/form-data body"):
        await run_hook(BodyLimits().on_request(ctx))


async def test_a_route_without_a_body_reads_nothing(services: PluginServices) -> None:
    ctx = await context_before("body_limits", services, method="GET", path="/v1/responses/resp_1")

    await run_hook(BodyLimits().on_request(ctx))

    assert (ctx.body, ctx.payload) == (b"", None)
