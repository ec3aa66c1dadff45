"""The seeded workload of the money conservation test: every call, credit and restart decided up front from
one seed, so a failing run is replayed with the same mix (only the interleaving differs)."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

# How the upstream behind a chat model behaves (one fake upstream, one provider and one model each).
STEADY = "steady"  # answers in full, usage reported
BREAKING = "breaking"  # breaks off mid-stream
FAILING = "failing"  # 500 before the first byte
UNAVAILABLE = "unavailable"  # 503 before the first byte
SILENT = "silent"  # answers in full without any usage
OVERRUNNING = "overrunning"  # ignores the request's cap: answers (and reports) more than was reserved for
BEHAVIOURS = (STEADY, BREAKING, FAILING, UNAVAILABLE, SILENT, OVERRUNNING)
SLOW = "slow"  # answers in full, usage reported, after its client has left (abandoned calls only)

# How the client reads a chat answer.
SDK_STREAM = "sdk_stream"  # the official openai SDK, streamed and read to the end
SDK_PLAIN = "sdk_plain"  # the official openai SDK, not streamed
RAW_STREAM = "raw_stream"  # httpx, streamed and read to the end (broken streams included)
RAW_CUT = "raw_cut"  # httpx, streamed, the client closes after `cut_after` content events


@dataclass(frozen=True, slots=True)
class ChatCall:
    """One chat completion request."""

    index: int
    organization: int
    gateway: int
    behaviour: str
    style: str
    words: int  # of the prompt; the fake's echo answers `words + 1` tokens before any cap
    cap: int | None  # max_tokens sent, None: the model's default applies
    n: int
    include_usage: bool  # streams: the client asks for the usage chunk itself
    cut_after: int = 0  # RAW_CUT: content events read before closing

    @property
    def request_id(self) -> str:
        return f"chat-{self.index:04d}"


@dataclass(frozen=True, slots=True)
class RealtimeCall:
    """One realtime session: `responses` response.create events, each awaited, the last one maybe not."""

    index: int
    organization: int
    gateway: int
    responses: int
    leave_early: bool  # close right after the last response.create, without waiting for its done

    @property
    def request_id(self) -> str:
        return f"rt-{self.index:04d}"


@dataclass(frozen=True, slots=True)
class BalanceChange:
    """An operator's top-up or adjustment (credit, debit, set) while requests are in flight."""

    index: int
    organization: int
    gateway: int
    kind: str  # "top_up", "credit", "debit", "set"
    amount_micros: int


@dataclass(frozen=True, slots=True)
class Restart:
    """A gateway stopped mid-mix, gracefully (SIGTERM) or not (SIGKILL), then started again."""

    index: int
    gateway: int
    hard: bool


@dataclass(frozen=True, slots=True)
class BackgroundCall:
    """One `POST /v1/responses` with `background: true`: queued with usage null, finished by the provider
    once created; the gateway follows it and charges its final usage (across restarts too)."""

    index: int
    organization: int
    gateway: int
    words: int
    cap: int  # max_output_tokens

    @property
    def request_id(self) -> str:
        return f"bg-{self.index:04d}"


@dataclass(frozen=True, slots=True)
class AbandonedCall:
    """One non-streamed chat whose client leaves after it was sent, before the slow provider answers: the
    gateway reads the answer to its end and charges the provider's usage (`[billing] abandoned_calls`)."""

    index: int
    organization: int
    gateway: int
    words: int
    cap: int
    behaviour: str = SLOW

    @property
    def request_id(self) -> str:
        return f"gone-{self.index:04d}"


@dataclass(frozen=True, slots=True)
class RedisOutage:
    """Redis stopped mid-mix for `seconds` and started again (gateways in `[redis] outage = "degraded"`)."""

    index: int
    seconds: float


Operation = ChatCall | RealtimeCall | BackgroundCall | AbandonedCall | BalanceChange | Restart | RedisOutage


@dataclass(frozen=True, slots=True)
class MixShape:
    """Sizes of the mix."""

    organizations: int = 3
    gateways: int = 1
    requests: int = 150
    realtime_share: float = 0.1
    background_share: float = 0.07
    abandoned_share: float = 0.07
    changes: int = 8
    redis_outage: float = 0.0  # seconds of a Redis outage at 15 % of the mix; 0: none


def plan_mix(seed: int, shape: MixShape) -> list[Operation]:
    """The operations of one run, in issue order: `shape.requests` calls with balance changes spread among
    them, a Redis outage at 15 % (when the shape has one: before the restarts, so every process serving in
    it has read its headroom), a graceful restart at about a third and a kill at about two thirds."""
    rng = random.Random(seed)
    operations: list[Operation] = []
    change_at = set(rng.sample(range(5, shape.requests - 5), shape.changes))
    restart_at, kill_at = int(shape.requests * 0.35), int(shape.requests * 0.7)
    outage_at = int(shape.requests * 0.15) if shape.redis_outage else -1
    for position in range(shape.requests):
        if position == outage_at:
            operations.append(RedisOutage(len(operations), shape.redis_outage))
        if position == restart_at:
            operations.append(Restart(len(operations), 0, hard=False))
        if position == kill_at:
            operations.append(Restart(len(operations), shape.gateways - 1, hard=True))
        if position in change_at:
            operations.append(_balance_change(rng, len(operations), shape))
        kind = rng.random()
        if kind < shape.realtime_share:
            operations.append(_realtime_call(rng, len(operations), shape))
        elif kind < shape.realtime_share + shape.background_share:
            operations.append(_late_call(BackgroundCall, rng, len(operations), shape))
        elif kind < shape.realtime_share + shape.background_share + shape.abandoned_share:
            operations.append(_late_call(AbandonedCall, rng, len(operations), shape))
        else:
            operations.append(_chat_call(rng, len(operations), shape))
    return _with_a_chargeable_overrun(operations)


def _with_a_chargeable_overrun(operations: list[Operation]) -> list[Operation]:
    """The plan with at least one overrunning call the audit can see charged: on the organization that never
    runs short, before the first outage or restart (which may cut it or refuse it). Without one a mix
    exercises no overrun (seed 1448417331: its three were two cut by the kill and one refused 402). Made
    after the draws, from the first steady chat there (else its first chat there, else its first steady chat):
    every other call is unchanged."""
    calm = next(
        (i for i, op in enumerate(operations) if isinstance(op, RedisOutage | Restart)), len(operations)
    )
    early = [
        (i, op) for i, op in enumerate(operations[:calm]) if isinstance(op, ChatCall) and not op.organization
    ]
    if any(op.behaviour == OVERRUNNING for _, op in early):
        return operations
    chosen = next(((i, op) for i, op in early if op.behaviour == STEADY), None) or next(iter(early), None)
    if chosen is None:  # no chat of that organization before it (the first 22 calls of an outage's mix)
        later = [
            (i, op) for i, op in enumerate(operations) if isinstance(op, ChatCall) and not op.organization
        ]
        chosen = next(((i, op) for i, op in later if op.behaviour == STEADY), None)
    if chosen is None:
        return operations
    i, call = chosen
    style = SDK_STREAM if call.style == RAW_CUT else call.style
    operations[i] = replace(call, behaviour=OVERRUNNING, cap=1, words=28, n=2, style=style, cut_after=0)
    return operations


def _chat_call(rng: random.Random, index: int, shape: MixShape) -> ChatCall:
    behaviour = rng.choices(BEHAVIOURS, weights=(50, 15, 8, 6, 13, 8))[0]
    if behaviour == BREAKING:
        style = rng.choice((RAW_STREAM, RAW_STREAM, RAW_CUT, SDK_PLAIN))
    else:
        style = rng.choices((SDK_STREAM, SDK_PLAIN, RAW_STREAM, RAW_CUT), weights=(30, 25, 15, 30))[0]
    cap_kind = rng.random()
    cap = None if cap_kind < 0.4 else rng.randint(1, 5) if cap_kind < 0.7 else rng.randint(10, 60)
    words = rng.randint(3, 30)
    n = 1 if rng.random() < 0.8 else rng.randint(2, 3)
    if behaviour == OVERRUNNING:
        # Far past a cap of 1, answered n times: more over the output reservation than the prompt's byte
        # estimate leaves spare (~3 bytes a word, 2 bytes a token), so a call read to the end overruns.
        cap, words, n = 1, rng.randint(25, 30), rng.randint(2, 3)
    organization, gateway = rng.randrange(shape.organizations), rng.randrange(shape.gateways)
    include_usage = rng.random() < 0.5
    cut_after = rng.randint(1, 12) if style == RAW_CUT else 0
    if behaviour == OVERRUNNING and style == RAW_CUT:
        # Read to its end, so the overrun is charged: a mix whose few overrunning calls were all cut by their
        # clients exercised none (seed 1739317603). Decided after the draws: every other call is unchanged.
        style, cut_after = SDK_STREAM, 0
    return ChatCall(
        index=index,
        organization=organization,
        gateway=gateway,
        behaviour=behaviour,
        style=style,
        words=words,
        cap=cap,
        n=n,
        include_usage=include_usage,
        cut_after=cut_after,
    )


def _realtime_call(rng: random.Random, index: int, shape: MixShape) -> RealtimeCall:
    return RealtimeCall(
        index=index,
        organization=rng.randrange(shape.organizations),
        gateway=rng.randrange(shape.gateways),
        responses=rng.randint(1, 4),
        leave_early=rng.random() < 0.3,
    )


def _late_call(
    kind: type[BackgroundCall] | type[AbandonedCall], rng: random.Random, index: int, shape: MixShape
) -> BackgroundCall | AbandonedCall:
    return kind(
        index=index,
        organization=rng.randrange(shape.organizations),
        gateway=rng.randrange(shape.gateways),
        words=rng.randint(3, 30),
        cap=rng.randint(5, 60),
    )


def _balance_change(rng: random.Random, index: int, shape: MixShape) -> BalanceChange:
    # Mostly the organizations that run short, so credits land while their requests are being refused.
    organization = rng.choice([o for o in range(shape.organizations) if o] or [0])
    kind = rng.choices(("top_up", "credit", "debit", "set"), weights=(4, 3, 2, 1))[0]
    amount = rng.randint(1_000, 6_000) if kind != "debit" else rng.randint(200, 1_500)
    return BalanceChange(index, organization, rng.randrange(shape.gateways), kind, amount)
