"""The fake's chat completions answer `n` times (usage counts every answer) and, on cue, report no usage."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.fakes import FakeUpstream, Fault

KEY = "sk-fake-test-key"
CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "one two three"}]


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream("answers", api_key=KEY) as server:
        yield server


@pytest.fixture
def oai(fake: FakeUpstream) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.base_url + "/v1", api_key=KEY, max_retries=0)


def test_n_answers_are_n_choices_and_usage_counts_them_all(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(model="m", n=3, messages=USER)
    assert [choice.index for choice in completion.choices] == [0, 1, 2]
    assert {choice.message.content for choice in completion.choices} == {"echo: one two three"}
    assert completion.usage.completion_tokens == 3 * 4


def test_a_streamed_n_sends_every_answer_and_its_finish(oai: openai.OpenAI) -> None:
    chunks = list(
        oai.chat.completions.create(
            model="m", n=2, max_tokens=2, stream=True, stream_options={"include_usage": True}, messages=USER
        )
    )
    texts = {0: "", 1: ""}
    finishes = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert texts == {0: "echo: one", 1: "echo: one"}
    assert finishes == {0: "length", 1: "length"}
    assert chunks[-1].usage.completion_tokens == 2 * 2


def test_an_n_out_of_range_is_refused_like_the_real_api(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model="m", n=0, messages=USER)


def test_omit_usage_answers_without_usage(fake: FakeUpstream, oai: openai.OpenAI) -> None:
    fake.add_fault(CHAT, Fault(omit_usage=True), times=2)
    completion = oai.chat.completions.create(model="m", messages=USER)
    assert completion.choices[0].message.content == "echo: one two three"
    assert completion.usage is None
    chunks = list(
        oai.chat.completions.create(
            model="m", stream=True, stream_options={"include_usage": True}, messages=USER
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: one two three"
    assert all(chunk.usage is None for chunk in chunks)
