"""The field matrix (modelgate/proxy/translation/field_matrix.py): complete against the SDKs' request types,
rendered into docs/translation-fields.md, and enforced by the translators themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from anthropic.types import message_create_params
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params

from modelgate.proxy.translation.chat_to_messages import messages_request_of
from modelgate.proxy.translation.field_matrix import MATRICES, render_markdown
from modelgate.proxy.translation.field_rules import REFUSED, FieldRefused, check_fields
from modelgate.proxy.translation.messages_to_chat import chat_request_of
from modelgate.proxy.translation.responses_to_chat import chat_request_of as chat_request_of_responses
from modelgate.proxy.upstream.dialects.bedrock_converse import chat_to_converse
from modelgate.proxy.upstream.dialects.gemini_format import gemini_request

DOC = Path(__file__).resolve().parents[2] / "docs" / "translation-fields.md"
SDK_TYPES: dict[str, tuple[type, ...]] = {
    "openai-chat": (
        completion_create_params.CompletionCreateParamsNonStreaming,
        completion_create_params.CompletionCreateParamsStreaming,
    ),
    "openai-responses": (
        response_create_params.ResponseCreateParamsNonStreaming,
        response_create_params.ResponseCreateParamsStreaming,
    ),
    "anthropic-messages": (
        message_create_params.MessageCreateParamsNonStreaming,
        message_create_params.MessageCreateParamsStreaming,
    ),
}
CHAT = {"model": "anthropic.claude-x", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
# Each route's request builder, and a request it accepts.
BUILDERS: dict[str, tuple[Any, dict[str, Any]]] = {
    "chat→messages": (lambda payload: messages_request_of(payload, "claude-upstream", 4096), CHAT),
    "chat→converse": (chat_to_converse, CHAT),
    "chat→gemini": (gemini_request, {**CHAT, "model": "gemini-2.5-flash"}),
    "messages→chat": (lambda payload: chat_request_of(payload, "gpt-upstream"), MESSAGES),
    "responses→chat": (
        lambda payload: chat_request_of_responses(payload, "up"),
        {"model": "m", "input": "hi"},
    ),
}
# A value each refusal condition holds for, by the condition's text.
REFUSED_VALUES = {
    "set": "some value",
    "true": True,
    "false": False,
    "not empty": {"key": "value"},
    "not 0": 1,
    "greater than 1": 2,
    'anything but ["text"]': ["text", "audio"],
    "enabled or adaptive": {"type": "enabled", "budget_tokens": 2048},
}


def fields_without_entry(api: str, matrix_fields: Any, types: tuple[type, ...]) -> set[str]:
    """The request fields of `types` (TypedDicts, with their bases) that `matrix_fields` does not list."""
    fields: set[str] = set()
    for request_type in types:
        for klass in request_type.__mro__:
            fields |= set(getattr(klass, "__annotations__", {}))
    return fields - set(matrix_fields)


def refused_value(text: str) -> Any:
    return REFUSED_VALUES.get(text, "a value none of the listed" if text.startswith("anything but") else None)


@pytest.mark.parametrize("route", MATRICES)
def test_every_request_field_of_the_clients_sdk_has_an_entry(route: str) -> None:
    matrix = MATRICES[route]
    assert fields_without_entry(matrix.client_api, matrix.fields, SDK_TYPES[matrix.client_api]) == set()


def test_a_field_the_sdk_gains_without_an_entry_is_reported() -> None:
    class Newer(completion_create_params.CompletionCreateParamsNonStreaming, total=False):
        brand_new_field: int

    missing = fields_without_entry("openai-chat", MATRICES["chat→messages"].fields, (Newer,))
    assert missing == {"brand_new_field"}


def test_the_doc_table_is_the_matrix_rendered() -> None:
    assert DOC.read_text() == render_markdown(), (
        "docs/translation-fields.md is stale: render it again (the command is at its top)"
    )


@pytest.mark.parametrize("route", MATRICES)
def test_each_route_builder_accepts_its_plain_request(route: str) -> None:
    build, payload = BUILDERS[route]
    assert build(dict(payload))


@pytest.mark.parametrize(
    ("route", "field"),
    [
        (route, name)
        for route, matrix in MATRICES.items()
        for name, entry in matrix.fields.items()
        if entry.refused_when is not None
    ],
)
def test_each_refused_value_is_refused_by_the_routes_translator_naming_the_field(
    route: str, field: str
) -> None:
    entry = MATRICES[route].fields[field]
    value = refused_value(entry.refused_when.text)
    assert value is not None, f"no sample value for the condition {entry.refused_when.text!r}"
    build, payload = BUILDERS[route]
    with pytest.raises(FieldRefused) as refused:
        build({**payload, field: value})
    assert refused.value.field == field
    assert refused.value.for_provider("acme").message.startswith(
        f"'{field}' cannot be sent to provider 'acme'"
    )


@pytest.mark.parametrize("route", MATRICES)
def test_a_field_no_entry_lists_is_refused(route: str) -> None:
    build, payload = BUILDERS[route]
    with pytest.raises(FieldRefused, match=r"'logit_biass' cannot be sent .*unknown field"):
        build({**payload, "logit_biass": {}})


def test_refused_entries_always_say_when() -> None:
    for matrix in MATRICES.values():
        for name, entry in matrix.fields.items():
            assert entry.handling != REFUSED or entry.refused_when is not None, name


def test_a_value_the_condition_allows_passes() -> None:
    check_fields(
        {"n": 1, "seed": None, "store": False, "modalities": ["text"]}, MATRICES["chat→messages"].fields
    )
