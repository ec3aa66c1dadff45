"""Access log: one structured line per request on `modelgate.access`, naming ids and never a secret."""

from __future__ import annotations

import logging

import pytest

from modelgate.domain.errors import RateLimited
from modelgate.plugins.access_log import AccessLog
from modelgate.proxy.pipeline.context import Usage
from tests.support.plugin_context import PluginServices, StoredKey, answered, context_before, request_context

CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "a secret prompt"}], "max_tokens": 100}


def _lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "modelgate.access"]


async def test_an_answered_request_logs_one_info_line_with_its_fields(
    services: PluginServices, key: StoredKey, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "modelgate.access")
    ctx = await context_before("access_log", services, payload=CHAT, key=key.record)
    answered(ctx, body=b"{}")
    ctx.metering.usage, ctx.metering.cost_micros = Usage(input_tokens=12, output_tokens=5), 74

    AccessLog(log_prompts=False).on_complete(ctx)

    (line,) = _lines(caplog)
    assert line.levelno == logging.INFO
    assert line.getMessage() == "POST /v1/chat/completions 200"
    fields = line.fields
    assert {name: fields[name] for name in ("request_id", "route", "organization_id", "key_id", "model")} == {
        "request_id": ctx.request_id,
        "route": "chat_completions",
        "organization_id": key.record.organization_id,
        "key_id": key.record.id,
        "model": "gpt-test",
    }
    assert (fields["row"], fields["provider"], fields["status"], fields["attempts"]) == (
        "openai/gpt-test-2025@openai.test",
        "openai",
        200,
        1,
    )
    assert (fields["input_tokens"], fields["output_tokens"], fields["cost_micros"]) == (12, 5, 74)


async def test_the_line_holds_no_secret_no_query_and_no_prompt(
    services: PluginServices, key: StoredKey, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "modelgate.access")
    ctx = await context_before(
        "access_log",
        services,
        path="/v1/chat/completions?client_secret=ek_hidden",
        payload=CHAT,
        key=key.record,
        headers={"Authorization": f"Bearer {key.secret}"},
    )
    answered(ctx, body=b"{}")

    AccessLog(log_prompts=False).on_complete(ctx)

    (line,) = _lines(caplog)
    text = repr(line.__dict__)
    assert key.secret not in text and "ek_hidden" not in text and "a secret prompt" not in text
    assert line.fields["path"] == "/v1/chat/completions"


async def test_a_refusal_names_its_error_code(
    services: PluginServices, key: StoredKey, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "modelgate.access")
    ctx = await context_before("access_log", services, payload=CHAT, key=key.record)
    ctx.error, ctx.status = RateLimited("slow down"), 429

    AccessLog(log_prompts=False).on_complete(ctx)

    (line,) = _lines(caplog)
    assert (line.fields["error"], line.fields["row"]) == ("rate_limit_exceeded", None)


async def test_an_unknown_model_is_logged_as_requested(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "modelgate.access")
    ctx = request_context(body={"model": "gpt-" + "9" * 300})
    ctx.payload, ctx.status = {"model": "gpt-" + "9" * 300}, 404

    AccessLog(log_prompts=False).on_complete(ctx)

    (line,) = _lines(caplog)
    assert line.fields["model"] == ("gpt-" + "9" * 300)[:200]  # clipped: it is client input


async def test_an_internal_error_is_logged_at_error_level(
    services: PluginServices, key: StoredKey, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "modelgate.access")
    ctx = await context_before("access_log", services, payload=CHAT, key=key.record)
    ctx.error, ctx.status = RuntimeError("bug"), 500

    AccessLog(log_prompts=False).on_complete(ctx)

    (line,) = _lines(caplog)
    assert (line.levelno, line.fields["error"]) == (logging.ERROR, "internal")


async def test_with_log_prompts_the_body_goes_to_a_separate_debug_line(
    services: PluginServices, key: StoredKey, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "modelgate.access")
    ctx = await context_before("access_log", services, payload=CHAT, key=key.record)
    answered(ctx, body=b"{}")

    AccessLog(log_prompts=True).on_complete(ctx)

    access, body = _lines(caplog)
    assert "a secret prompt" not in repr(access.__dict__)
    assert body.levelno == logging.DEBUG and "a secret prompt" in body.body
