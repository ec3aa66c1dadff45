"""Content rules on prompts: every text the model sees, on every route, blocked (403 in the route's envelope,
nothing sent upstream), redacted before it leaves, or flagged (sent as written, recorded)."""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

from tests.integration.content_policy.conftest import Stack
from tests.integration.ops.conftest import scrape

SECRET = "project nightingale"
EMAIL = "alice.smith@example.com"


def _assert_blocked_a(reply, rule_id: str) -> None:
    assert reply.status_code == 403, reply.text
    body = reply.json()
    assert set(body) == {"error"} and body["error"]["type"] == "invalid_request_error"
    assert "code" not in body["error"] or body["error"]["code"] is None
    assert rule_id in body["error"]["message"]


def test_a_blocked_chat_prompt_is_403_naming_the_rule_and_never_the_text(stack: Stack) -> None:
    rule = stack.rule("block", phrases=[SECRET])
    with stack.openai() as client, pytest.raises(openai.PermissionDeniedError) as caught:
        client.chat.completions.create(
            model="gpt", messages=[{"role": "user", "content": "Tell me about PROJECT Nightingale."}]
        )
    assert caught.value.status_code == 403
    message = caught.value.body["message"]
    assert rule["id"] in message and "nightingale" not in message.lower()
    assert stack.oai.requests == []


def test_a_blocked_prompt_on_messages_is_a_permission_error_in_envelope_b(stack: Stack) -> None:
    rule = stack.rule("block", detectors=["email"])
    with stack.anthropic() as client, pytest.raises(anthropic.PermissionDeniedError) as caught:
        client.messages.create(
            model="claude", max_tokens=20, messages=[{"role": "user", "content": f"write to {EMAIL}"}]
        )
    body = caught.value.response.json()
    assert body["type"] == "error" and body["error"]["type"] == "permission_error"
    assert rule["id"] in body["error"]["message"] and EMAIL not in body["error"]["message"]
    assert stack.anth.requests == []


# Every route and form that carries a prompt text, with SECRET in it.
ROUTE_TEXTS = [
    ("/v1/chat/completions", {"model": "gpt", "messages": [{"role": "user", "content": "x " + SECRET}]}),
    (
        "/v1/chat/completions",
        {"model": "gpt", "messages": [{"role": "user", "content": [{"type": "text", "text": SECRET}]}]},
    ),
    (
        "/v1/chat/completions",
        {
            "model": "gpt",
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"q": "' + SECRET + '"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
            ],
        },
    ),
    ("/v1/completions", {"model": "gpt", "prompt": ["fine", "about " + SECRET]}),
    ("/v1/responses", {"model": "gpt", "input": SECRET}),
    ("/v1/responses", {"model": "gpt", "input": "hi", "instructions": "mention " + SECRET}),
    (
        "/v1/responses",
        {
            "model": "gpt",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": SECRET}]}],
        },
    ),
    ("/v1/embeddings", {"model": "gpt", "input": ["a", SECRET]}),
    ("/v1/images/generations", {"model": "gpt", "prompt": "a drawing of " + SECRET}),
    ("/v1/videos", {"model": "gpt", "prompt": "a film about " + SECRET}),
    (
        "/v1/decisions",
        {
            "model": "gpt",
            "input": "hello",
            "questions": [{"type": "predicate", "name": "p", "instructions": "Is it about " + SECRET + "?"}],
        },
    ),
]


@pytest.mark.parametrize(("path", "body"), ROUTE_TEXTS)
def test_a_block_rule_refuses_the_text_wherever_the_route_carries_it(
    stack: Stack, path: str, body: dict
) -> None:
    rule = stack.rule("block", phrases=[SECRET])
    _assert_blocked_a(stack.post(path, body), rule["id"])
    assert stack.oai.requests == []


@pytest.mark.parametrize(
    "content",
    [
        "x " + SECRET,
        [{"type": "text", "text": SECRET}],
        [{"type": "tool_result", "tool_use_id": "t1", "content": SECRET}],
    ],
)
def test_a_block_rule_refuses_messages_texts_in_envelope_b(stack: Stack, content) -> None:
    stack.rule("block", phrases=[SECRET])
    messages = [{"role": "user", "content": content}]
    if isinstance(content, list) and content[0]["type"] == "tool_result":
        messages = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            messages[0],
        ]
    reply = stack.post("/v1/messages", {"model": "claude", "max_tokens": 10, "messages": messages})
    assert reply.status_code == 403, reply.text
    assert reply.json()["error"]["type"] == "permission_error"
    assert stack.anth.requests == []


def test_the_system_prompt_of_messages_is_scanned(stack: Stack) -> None:
    stack.rule("block", phrases=[SECRET])
    reply = stack.post(
        "/v1/messages",
        {
            "model": "claude",
            "max_tokens": 10,
            "system": [{"type": "text", "text": "know about " + SECRET}],
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    assert reply.status_code == 403


def test_a_decision_input_is_scanned(stack: Stack) -> None:
    stack.rule("block", detectors=["payment_card"])
    reply = stack.post(
        "/v1/decisions",
        {
            "model": "gpt",
            "input": "my card is 4111 1111 1111 1111",
            "questions": [{"type": "predicate", "name": "p", "instructions": "Is it a card?"}],
        },
    )
    assert reply.status_code == 403, reply.text


def test_a_redacted_prompt_reaches_the_provider_with_the_match_replaced(stack: Stack) -> None:
    stack.rule("redact", detectors=["email"])
    with stack.openai() as client:
        answer = client.chat.completions.create(
            model="gpt", messages=[{"role": "user", "content": f"mail {EMAIL} today"}]
        )
    [sent] = stack.oai.requests_to("/v1/chat/completions")
    assert sent.json["messages"][0]["content"] == "mail [REDACTED:email] today"
    assert EMAIL not in sent.body.decode()
    assert EMAIL not in answer.choices[0].message.content  # the echo of what the model saw


def test_redaction_reaches_tool_arguments_and_messages_blocks(stack: Stack) -> None:
    stack.rule("redact", detectors=["credentials"])
    key = "AKIAIOSFODNN7EXAMPLE"
    reply = stack.post(
        "/v1/messages",
        {
            "model": "claude",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": [{"type": "text", "text": f"my key is {key}"}]}],
        },
    )
    assert reply.status_code == 200, reply.text
    [sent] = stack.anth.requests_to("/v1/messages")
    assert sent.json["messages"][0]["content"][0]["text"] == "my key is [REDACTED:credentials]"


def test_a_flagged_prompt_is_sent_as_written_and_audited(stack: Stack) -> None:
    rule = stack.rule("flag", phrases=[SECRET])
    reply = stack.post(
        "/v1/chat/completions", {"model": "gpt", "messages": [{"role": "user", "content": SECRET}]}
    )
    assert reply.status_code == 200
    [sent] = stack.oai.requests_to("/v1/chat/completions")
    assert sent.json["messages"][0]["content"] == SECRET
    entries = _audit_eventually(stack, rule["id"])
    assert entries[0]["event"] == "content_policy.flagged"
    assert entries[0]["details"]["where"] == "prompt" and entries[0]["details"]["label"] == "phrase"
    assert entries[0]["keyId"] == stack.tenant.key_id and entries[0]["route"] == "chat_completions"
    assert SECRET not in str(entries[0])


def test_a_rule_for_other_models_does_not_touch_this_one(stack: Stack) -> None:
    stack.rule("block", phrases=[SECRET], models=["claude*"])
    reply = stack.post(
        "/v1/chat/completions", {"model": "gpt", "messages": [{"role": "user", "content": SECRET}]}
    )
    assert reply.status_code == 200


def test_an_answer_only_rule_does_not_scan_the_prompt(stack: Stack) -> None:
    stack.rule("block", where="answer", phrases=["nothing like this"])
    reply = stack.post(
        "/v1/chat/completions", {"model": "gpt", "messages": [{"role": "user", "content": SECRET}]}
    )
    assert reply.status_code == 200


def test_a_blocked_prompt_costs_nothing_and_its_ledger_row_says_blocked(stack: Stack) -> None:
    rule = stack.rule("block", phrases=[SECRET])
    reply = stack.post(
        "/v1/chat/completions", {"model": "gpt", "messages": [{"role": "user", "content": SECRET}]}
    )
    assert reply.status_code == 403
    request_id = reply.headers["x-request-id"]
    row = _ledger_row_eventually(stack, request_id)
    assert row["content_action"] == "blocked" and row["cost_micros"] == 0 and row["status"] == 403
    assert _audit_eventually(stack, rule["id"])[0]["event"] == "content_policy.blocked"


def _audit_eventually(stack: Stack, rule_id: str) -> list[dict]:
    """The rule's audit entries, once the background writer has written them (bounded wait)."""
    deadline = time.monotonic() + 10
    while True:
        entries = stack.audit(ruleId=rule_id)
        if entries or time.monotonic() > deadline:
            return entries
        time.sleep(0.05)


def _ledger_row_eventually(stack: Stack, request_id: str) -> dict:
    deadline = time.monotonic() + 10
    while True:
        rows = [r for r in stack.ledger_rows() if r["request_id"] == request_id]
        if rows or time.monotonic() > deadline:
            assert rows, f"no ledger row for {request_id}"
            return rows[0]
        time.sleep(0.05)


def test_each_action_is_counted_by_rule_action_and_where(stack: Stack) -> None:
    flag = stack.rule("flag", phrases=[SECRET])
    redact = stack.rule("redact", where="answer", detectors=["email"])
    for _ in range(2):
        reply = stack.post(
            "/v1/chat/completions",
            {"model": "gpt", "messages": [{"role": "user", "content": f"{SECRET} {EMAIL}"}]},
        )
        assert reply.status_code == 200
    metrics = scrape(stack.base_url)
    counted = "modelgate_content_policy_actions_total"
    assert metrics.value(counted, rule=flag["id"], action="flag", where="prompt") == 2
    assert metrics.value(counted, rule=redact["id"], action="redact", where="answer") == 2


def test_realtime_session_instructions_are_checked_when_the_secret_is_minted(stack: Stack) -> None:
    rule = stack.rule("block", phrases=[SECRET])
    session = {"type": "realtime", "model": "gpt", "instructions": "talk about " + SECRET}
    _assert_blocked_a(stack.post("/v1/realtime/client_secrets", {"session": session}), rule["id"])
    stack.cabinet("DELETE", f"/policy-rules/{rule['id']}")
    stack.rule("redact", detectors=["email"])
    session["instructions"] = f"greet {EMAIL}"
    with stack.openai() as client:
        secret = client.realtime.client_secrets.create(session=session)
    assert secret.session.instructions == "greet [REDACTED:email]"


@pytest.mark.parametrize(("path", "body"), ROUTE_TEXTS)
def test_a_redact_rule_rewrites_the_text_wherever_the_route_carries_it(
    stack: Stack, path: str, body: dict
) -> None:
    stack.rule("redact", phrases=[SECRET])
    assert stack.post(path, body).status_code == 200
    [sent] = stack.oai.requests_to(path)
    assert SECRET not in sent.body.decode().lower()
    assert "[REDACTED:phrase]" in sent.body.decode()


@pytest.mark.parametrize(("path", "body"), ROUTE_TEXTS)
def test_a_flag_rule_sends_the_text_as_written_and_audits_it(stack: Stack, path: str, body: dict) -> None:
    rule = stack.rule("flag", phrases=[SECRET])
    reply = stack.post(path, body)
    assert reply.status_code == 200
    [sent] = stack.oai.requests_to(path)
    assert SECRET in sent.body.decode()
    [entry] = _audit_eventually(stack, rule["id"])
    assert (
        entry["event"] == "content_policy.flagged"
        and entry["details"]["requestId"] == reply.headers["x-request-id"]
    )


def test_a_pattern_anchored_to_a_texts_start_matches_each_text_of_the_prompt(stack: Stack) -> None:
    stack.rule("block", patterns=["^secret plan$"])
    messages = [{"role": "system", "content": "be kind"}, {"role": "user", "content": "secret plan"}]
    assert stack.post("/v1/chat/completions", {"model": "gpt", "messages": messages}).status_code == 403
    messages[1]["content"] = "the secret plan"
    assert stack.post("/v1/chat/completions", {"model": "gpt", "messages": messages}).status_code == 200


def test_a_redacted_request_is_charged_as_usual_and_its_ledger_row_says_redacted(stack: Stack) -> None:
    stack.rule("redact", detectors=["email"])
    reply = stack.post(
        "/v1/chat/completions", {"model": "gpt", "messages": [{"role": "user", "content": f"to {EMAIL}"}]}
    )
    assert reply.status_code == 200
    row = _ledger_row_eventually(stack, reply.headers["x-request-id"])
    assert row["content_action"] == "redacted" and row["outcome"] == "completed" and row["cost_micros"] > 0


def test_a_flagged_messages_prompt_reaches_the_native_row_as_written(stack: Stack) -> None:
    rule = stack.rule("flag", detectors=["email"])
    with stack.anthropic() as client:
        client.messages.create(
            model="claude", max_tokens=20, messages=[{"role": "user", "content": f"write to {EMAIL}"}]
        )
    [sent] = stack.anth.requests_to("/v1/messages")
    assert sent.json["messages"][0]["content"] == f"write to {EMAIL}"
    [entry] = _audit_eventually(stack, rule["id"])
    assert entry["route"] == "messages" and entry["details"]["label"] == "email"


def test_a_prompt_redacted_on_messages_reaches_a_chat_row_redacted_after_translation(stack: Stack) -> None:
    stack.rule("redact", detectors=["email"])
    reply = stack.post(
        "/v1/messages",
        {"model": "gpt", "max_tokens": 20, "messages": [{"role": "user", "content": f"hi {EMAIL}"}]},
    )
    assert reply.status_code == 200, reply.text
    [sent] = stack.oai.requests_to("/v1/chat/completions")
    assert sent.json["messages"][-1]["content"] == "hi [REDACTED:email]"
    assert EMAIL not in sent.body.decode()
