"""Gemini's answers as OpenAI chat answers: a `GenerateContentResponse` as a chat completion, its SSE
stream as `chat.completion.chunk` events, and its errors in the OpenAI error shape.

Candidates become choices; text parts the content (thought summaries `reasoning_content`), their
`logprobsResult` the choice's `logprobs`; `functionCall`
parts tool calls with ids stable for the answer (`call_` + a digest of the answer id, candidate and
position) that carry the call's thought signature; `finishReason` the finish reason; `usageMetadata` the
usage (thinking tokens count as completion tokens and `reasoning_tokens`, cached prompt tokens as
`prompt_tokens_details.cached_tokens`, tool-use prompt tokens as prompt tokens, audio and image tokens by
modality in the details).
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import orjson

from modelgate.proxy.translation.sse import DONE_FRAME, SseParser, data_frame
from modelgate.proxy.upstream.dialects.base import broken, json_error
from modelgate.proxy.upstream.dialects.gemini_format import call_id_with_signature

_FILTERED = frozenset(
    ("SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "LANGUAGE")
)
# Google's error statuses the client caused; anything else keeps its HTTP status (5xx, 429 fail over).
_CLIENT_STATUSES = {"INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "OUT_OF_RANGE": 400}


_KEY_REFUSED = frozenset(("API_KEY_INVALID", "API_KEY_EXPIRED"))


def _reasons(error: dict[str, Any]) -> set[str]:
    details = error.get("details")
    return (
        {d["reason"] for d in details or () if isinstance(d, dict) and isinstance(d.get("reason"), str)}
        if isinstance(details, list)
        else set()
    )


def finish_reason_of(reason: Any, called: bool) -> str:
    """Gemini's `finishReason` as chat's `finish_reason`."""
    if reason in _FILTERED:
        return "content_filter"
    if reason == "MAX_TOKENS":
        return "length"
    if reason in ("MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"):
        return "stop"
    return "tool_calls" if called else "stop"


def usage_of(metadata: Any) -> dict[str, Any]:
    """Gemini's `usageMetadata` as chat usage."""
    metadata = metadata if isinstance(metadata, dict) else {}
    prompt = (metadata.get("promptTokenCount") or 0) + (metadata.get("toolUsePromptTokenCount") or 0)
    thoughts = metadata.get("thoughtsTokenCount") or 0
    completion = (metadata.get("candidatesTokenCount") or 0) + thoughts
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": metadata.get("totalTokenCount") or prompt + completion,
        "prompt_tokens_details": {"cached_tokens": metadata.get("cachedContentTokenCount") or 0},
    }
    prompt_details = usage["prompt_tokens_details"]
    cached_details = _by_modality(metadata.get("cacheTokensDetails"))
    for modality, tokens in _by_modality(metadata.get("promptTokensDetails")).items():
        prompt_details[modality] = tokens
    if cached_details:
        prompt_details["cached_tokens_details"] = cached_details
    completion_details = _by_modality(metadata.get("candidatesTokensDetails"))
    if thoughts:
        completion_details["reasoning_tokens"] = thoughts
    if completion_details:
        usage["completion_tokens_details"] = completion_details
    return usage


_MODALITY_TOKENS: dict[object, str] = {"AUDIO": "audio_tokens", "IMAGE": "image_tokens"}


def _by_modality(details: Any) -> dict[str, int]:
    """Gemini's `[{modality, tokenCount}]` as chat details' `audio_tokens` / `image_tokens` (text, video and
    documents are billed at the text rate, so they need no count of their own)."""
    counts: dict[str, int] = {}
    if isinstance(details, list):
        for item in details:
            if isinstance(item, dict) and (name := _MODALITY_TOKENS.get(item.get("modality"))):
                tokens = item.get("tokenCount")
                if isinstance(tokens, int) and tokens > 0:
                    counts[name] = counts.get(name, 0) + tokens
    return counts


def blocked_prompt(answer: Any) -> str | None:
    """Why Gemini refused the prompt itself (`promptFeedback.blockReason`, no candidates), else None."""
    if not isinstance(answer, dict) or answer.get("candidates"):
        return None
    feedback = answer.get("promptFeedback")
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    return str(reason) if reason else None


def blocked_error(reason: str) -> bytes:
    """The client's 400 for a prompt Gemini refused."""
    message = f"the prompt was blocked by the provider's content filter (blockReason {reason})"
    return json_error(400, message, "openai", code="content_filter")


def error_answer(status: int, body: bytes) -> tuple[int, bytes]:
    """A Gemini error answer (`{"error": {"code", "status", "message"}}`) as (status, OpenAI error body)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, list) and parsed:  # streamGenerateContent without alt=sse answers a JSON array
        parsed = parsed[0]
    error = parsed.get("error") if isinstance(parsed, dict) else None
    error = error if isinstance(error, dict) else {}
    message = error.get("message") if isinstance(error.get("message"), str) else None
    google_status = error.get("status") if isinstance(error.get("status"), str) else None
    status = _CLIENT_STATUSES.get(google_status or "", status)
    if _reasons(error) & _KEY_REFUSED:
        status = (
            401  # Gemini refuses a bad key with a 400; it is the host's credential, not the client's fault
        )
    if not message:
        message = f"the provider answered HTTP {status}"
    return status, json_error(
        status, message, "openai", code=google_status.lower() if google_status else None
    )


def _tool_call_id(answer_id: str, candidate: int, position: int, name: str) -> str:
    digest = hashlib.sha256(f"{answer_id}/{candidate}/{position}/{name}".encode()).hexdigest()[:24]
    return f"call_{digest}"


def _answer_id(answer: dict[str, Any]) -> str:
    given = answer.get("responseId")
    return given if isinstance(given, str) and given else os.urandom(12).hex()


class _Candidate:
    """What one candidate's parts say: its text, its calls, whether it thought."""

    __slots__ = ("calls", "reasoning", "text")

    def __init__(self, candidate: Any, answer_id: str, index: int, first_call: int) -> None:
        content = candidate.get("content") if isinstance(candidate, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        if parts is not None and not isinstance(parts, list):
            raise broken("candidate parts are not a list")
        texts: list[str] = []
        thoughts: list[str] = []  # the thought summary (asked for with reasoning_effort): reasoning_content
        self.calls: list[dict[str, Any]] = []
        for part in parts or ():
            if not isinstance(part, dict):
                raise broken("a candidate part is not an object")
            if isinstance(part.get("text"), str):
                (thoughts if part.get("thought") else texts).append(part["text"])
            call = part.get("functionCall")
            if isinstance(call, dict):
                if not isinstance(call.get("name"), str):
                    raise broken("a functionCall has no name")
                position = first_call + len(self.calls)
                call_id = _tool_call_id(answer_id, index, position, call["name"])
                self.calls.append(
                    {
                        "id": call_id_with_signature(call_id, part.get("thoughtSignature")),
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": orjson.dumps(call.get("args") or {}).decode(),
                        },
                    }
                )
        self.text = "".join(texts)
        self.reasoning = "".join(thoughts)


def logprobs_of(candidate: dict[str, Any]) -> dict[str, Any] | None:
    """A candidate's `logprobsResult` (asked for with `responseLogprobs`) as a chat choice's `logprobs`: each
    chosen token with its log probability and the alternatives Gemini listed for that step."""
    result = candidate.get("logprobsResult")
    if not isinstance(result, dict):
        return None
    chosen = result.get("chosenCandidates") or []
    steps = result.get("topCandidates") or []
    if not isinstance(chosen, list) or not isinstance(steps, list):
        raise broken("logprobsResult holds no lists")
    content = []
    for position, token in enumerate(chosen):
        step = steps[position] if position < len(steps) and isinstance(steps[position], dict) else {}
        alternatives = step.get("candidates") or []
        entry = _token_logprob(token)
        entry["top_logprobs"] = [_token_logprob(alt) for alt in alternatives if isinstance(alt, dict)]
        content.append(entry)
    return {"content": content, "refusal": None}


def _token_logprob(token: Any) -> dict[str, Any]:
    if not isinstance(token, dict) or not isinstance(token.get("token"), str):
        raise broken("a logprobs candidate has no token")
    text = token["token"]
    return {"token": text, "logprob": float(token.get("logProbability") or 0.0), "bytes": list(text.encode())}


def _candidates(answer: dict[str, Any]) -> list[dict[str, Any]]:
    candidates = answer.get("candidates") or []
    if not isinstance(candidates, list) or not all(isinstance(c, dict) for c in candidates):
        raise broken("candidates is not a list of objects")
    return candidates


def chat_completion(body: bytes, model: str) -> dict[str, Any]:
    """A whole `GenerateContentResponse` as a chat completion."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise broken("the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise broken("the answer is not a JSON object")
    answer_id = _answer_id(answer)
    choices = []
    for position, candidate in enumerate(_candidates(answer)):
        index = candidate.get("index", position)
        read = _Candidate(candidate, answer_id, index, 0)
        message: dict[str, Any] = {"role": "assistant", "content": read.text or None, "refusal": None}
        if read.calls:
            message["tool_calls"] = read.calls
        if read.reasoning:
            message["reasoning_content"] = read.reasoning
        reason = finish_reason_of(candidate.get("finishReason"), bool(read.calls))
        logprobs = logprobs_of(candidate)
        choices.append({"index": index, "message": message, "finish_reason": reason, "logprobs": logprobs})
    return {
        "id": f"chatcmpl-{answer_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage_of(answer.get("usageMetadata")),
    }


class ChatChunks:
    """Gemini's SSE stream (`alt=sse`: one `GenerateContentResponse` per `data:` event) in, chat completion
    chunks out; the usage chunk (`choices: []`) when `want_usage`, then `[DONE]`."""

    __slots__ = ("_calls", "_finished", "_id", "_model", "_parser", "_started", "_usage", "_want_usage")

    def __init__(self, model: str, want_usage: bool) -> None:
        self._model = model
        self._want_usage = want_usage
        self._parser = SseParser()
        self._id = ""
        self._started: set[int] = set()
        self._calls: dict[int, int] = {}  # candidate → tool calls sent so far
        self._finished: set[int] = set()
        self._usage: Any = None

    def feed(self, chunk: bytes) -> bytes:
        return b"".join(self._event(event.data) for event in self._parser.feed(chunk))

    def finish(self) -> bytes:
        out = b"".join(self._event(event.data) for event in self._parser.finish())
        if not self._finished:
            raise broken("the stream ended before a finishReason")
        if self._want_usage:
            out += data_frame(self._chunk([], usage=usage_of(self._usage)))
        return out + DONE_FRAME

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        chunk = {
            "id": f"chatcmpl-{self._id}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self._model,
            "choices": choices,
        }
        chunk.update(extra)
        return chunk

    def _event(self, data: bytes) -> bytes:
        if data.strip() == b"[DONE]":
            return b""
        try:
            answer = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise broken("a stream event is not JSON") from None
        if not isinstance(answer, dict):
            raise broken("a stream event is not a JSON object")
        if isinstance(answer.get("error"), dict):
            raise broken(f"the provider's stream failed: {answer['error'].get('message')}")
        if not self._id:
            self._id = _answer_id(answer)
        if answer.get("usageMetadata") is not None:
            self._usage = answer["usageMetadata"]
        if blocked_prompt(answer) and not self._started:
            raise broken(f"the prompt was blocked (blockReason {blocked_prompt(answer)})")
        out = []
        for position, candidate in enumerate(_candidates(answer)):
            index = candidate.get("index", position)
            read = _Candidate(candidate, self._id, index, self._calls.get(index, 0))
            delta: dict[str, Any] = {}
            if index not in self._started:
                self._started.add(index)
                delta = {"role": "assistant", "content": ""}
            if read.reasoning:
                delta["reasoning_content"] = read.reasoning
            if read.text:
                delta["content"] = read.text
            if read.calls:
                first = self._calls.get(index, 0)
                delta["tool_calls"] = [{"index": first + n, **call} for n, call in enumerate(read.calls)]
                self._calls[index] = first + len(read.calls)
            reason = candidate.get("finishReason")
            logprobs = logprobs_of(candidate)
            if delta or logprobs:
                choice = {"index": index, "delta": delta, "finish_reason": None, "logprobs": logprobs}
                out.append(data_frame(self._chunk([choice])))
            if reason and index not in self._finished:
                self._finished.add(index)
                finish = finish_reason_of(reason, bool(self._calls.get(index)))
                choice = {"index": index, "delta": {}, "finish_reason": finish, "logprobs": None}
                out.append(data_frame(self._chunk([choice])))
        return b"".join(out)
