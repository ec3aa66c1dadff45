"""POST /v1/decisions: the openai SDK's `client.decisions` works through the gateway; bad requests are 400."""

from __future__ import annotations

import asyncio

import openai
import pytest

from tests.integration.model_api.error_bodies import assert_envelope_a

# Nothing here fails a row or revokes a key: one gateway serves the whole module.
pytestmark = pytest.mark.shared_gateway

DECISIONS = "/v1/decisions"
PREDICATE = {"type": "predicate", "name": "is_greeting", "instructions": "Is the input a greeting?"}
CHOICE = {
    "type": "choice",
    "name": "tone",
    "instructions": "What is the tone?",
    "choices": [{"value": "friendly"}, {"value": "hostile"}],
}
SCORE = {
    "type": "score",
    "name": "politeness",
    "instructions": "How polite is it?",
    "levels": [{"label": "very"}, {"label": "somewhat"}, {"label": "not"}],
}


def test_sdk_decision_parses_into_the_sdk_type(client, alpha) -> None:
    decision = client.decisions.create(model="decider", input="hello there", questions=[PREDICATE])
    assert isinstance(decision, openai.types.Decision)
    [answer] = decision.answers
    assert answer.type == "predicate" and answer.name == "is_greeting"
    assert 0.0 <= answer.probability <= 1.0
    assert decision.usage.total_tokens == decision.usage.input_tokens + decision.usage.output_tokens
    [sent] = alpha.requests_to(DECISIONS)
    assert sent.json["questions"] == [PREDICATE]
    assert sent.json["input"] == "hello there"


def test_sdk_decision_answers_every_question_type_in_order(client) -> None:
    decision = client.decisions.create(model="decider", input="hi!", questions=[PREDICATE, CHOICE, SCORE])
    assert [a.type for a in decision.answers] == ["predicate", "choice", "score"]
    assert decision.answers[1].choice == "friendly"


def test_async_sdk_decision(gateway, tenant) -> None:
    async def decide() -> openai.types.Decision:
        async with openai.AsyncOpenAI(
            base_url=f"{gateway.base_url}/v1", api_key=tenant.api_key, max_retries=0
        ) as client:
            return await client.decisions.create(model="decider", input="hey", questions=[PREDICATE])

    assert asyncio.run(decide()).answers[0].type == "predicate"


def test_decision_with_message_input(client) -> None:
    decision = client.decisions.create(
        model="decider", questions=[PREDICATE], input=[{"role": "user", "content": "good morning"}]
    )
    assert decision.answers[0].type == "predicate"


def test_decision_on_a_model_that_does_not_decide_is_404_model_not_found(client) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.decisions.create(model="gpt-test", input="x", questions=[PREDICATE])
    assert raised.value.code == "model_not_found"
    assert raised.value.type == "invalid_request_error"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"input": "x"}, id="no-questions"),
        pytest.param({"input": "x", "questions": []}, id="empty-questions"),
        pytest.param({"input": "x", "questions": "is it?"}, id="questions-not-a-list"),
        pytest.param({"input": "x", "questions": ["is it?"]}, id="question-not-an-object"),
        pytest.param(
            {"input": "x", "questions": [{"type": "mystery", "instructions": "?"}]},
            id="unknown-question-type",
        ),
        pytest.param(
            {"input": "x", "questions": [{**PREDICATE, "name": 5}]}, id="question-name-not-a-string"
        ),
        pytest.param({"questions": [PREDICATE]}, id="no-input"),
        pytest.param({"input": "x", "questions": [PREDICATE], "stream": True}, id="stream"),
    ],
)
def test_invalid_decision_request_is_400_without_code(http, alpha, body) -> None:
    response = http.post(DECISIONS, json={"model": "decider", **body})
    assert_envelope_a(response, 400, "invalid_request_error")
    assert alpha.requests == []
