"""Content rules compile in a worker, never on the event loop (issue 33, finding 4): an edit that leaves
the terms alone compiles nothing, a long compile leaves the replaced rules serving, and a large rule set is
compiled into RE2 programs small enough that none holds the interpreter for long."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Executor, Future
from dataclasses import replace

import pytest

from modelgate.domain import policy_decisions
from modelgate.domain.content_rules import PROGRAM_CHARS, MatcherGroup, compile_content
from modelgate.domain.policy_decisions import CompiledPolicy, ContentCompilations
from tests.unit.test_content_rules import rule


class GatedCompiler(Executor):
    """Runs each submitted compile in its own thread once `open()` is called; counts them."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.submitted = 0

    def submit(self, fn, /, *args, **kwargs) -> Future:
        self.submitted += 1
        future: Future = Future()

        def run() -> None:
            self.gate.wait()
            future.set_result(fn(*args, **kwargs))

        threading.Thread(target=run, daemon=True).start()
        return future

    def open(self) -> None:
        self.gate.set()


async def _content(policy: CompiledPolicy):
    decision = policy.decide("key_1", None, "gpt")
    return (await policy.settled(decision, "key_1", None, "gpt")).content


async def test_an_edit_that_leaves_the_terms_alone_compiles_nothing() -> None:
    compiler, compilations = GatedCompiler(), ContentCompilations()
    compiler.open()
    before = rule("pol_1", "redact", "prompt", phrases=("secret",))
    first = CompiledPolicy("org", (before,), compilations, compiler)
    served = await _content(first)

    described = replace(before, description="now with a description", updated_at=1.0)
    second = CompiledPolicy("org", (described,), compilations, compiler, previous=first)

    assert await _content(second) is served
    assert compiler.submitted == 1


async def test_a_long_compile_leaves_the_replaced_rules_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_decisions, "SERVE_REPLACED_AFTER_SECONDS", 0.05)
    compiler, compilations = GatedCompiler(), ContentCompilations()
    compiler.open()
    old_rule = rule("pol_1", "redact", "prompt", phrases=("old secret",))
    old = CompiledPolicy("org", (old_rule,), compilations, compiler)
    old_content = await _content(old)
    compiler.gate.clear()  # the next compile does not end until the test says so

    new_rule = replace(old_rule, content=replace(old_rule.content, phrases=("new secret",)))
    new = CompiledPolicy("org", (new_rule,), compilations, compiler, previous=old)
    while_compiling = await asyncio.wait_for(_content(new), 10)
    [running] = compilations.running.values()
    compiler.open()
    await running
    after = await _content(new)

    assert while_compiling is old_content
    assert [m.rule_id for m in after.prompt.matcher.find("a new secret")] == ["pol_1"]
    assert after.prompt.matcher.find("an old secret") == []


async def test_without_replaced_rules_the_request_waits_for_its_compile() -> None:
    compiler = GatedCompiler()
    policy = CompiledPolicy("org", (rule("pol_1", "block", "prompt", phrases=("secret",)),), None, compiler)
    waiting = asyncio.ensure_future(_content(policy))
    done, _ = await asyncio.wait((waiting,), timeout=0.05)
    assert not done

    compiler.open()
    content = await waiting

    assert [m.rule_id for m in content.prompt.matcher.find("a secret")] == ["pol_1"]


def test_a_large_rule_set_compiles_into_small_programs_that_all_match() -> None:
    words = [f"word{index:04d}" for index in range(3 * PROGRAM_CHARS // 900 * 90)]
    patterns = tuple("(?:" + "|".join(words[i : i + 90]) + ")" for i in range(0, len(words), 90))
    content = compile_content([rule("pol_1", "redact", "prompt", patterns=patterns, phrases=("needle",))])
    matcher = content.prompt.matcher

    assert isinstance(matcher, MatcherGroup) and len(matcher._matchers) >= 3
    found = matcher.find(f"{words[0]} and {words[-1]} and a needle")
    assert [(m.rule_id, m.label) for m in found] == [
        ("pol_1", "pattern"),
        ("pol_1", "pattern"),
        ("pol_1", "phrase"),
    ]
