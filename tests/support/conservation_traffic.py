"""Drives the conservation mix against a gateway fleet and records what each client saw: the status of the
answer's head, how the answer ended, the content it delivered and the usage the upstream reported."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import httpx
import openai
import orjson

from tests.fakes.echo_model import echo_reply
from tests.support.conservation_mix import (
    OVERRUNNING,
    RAW_CUT,
    SDK_PLAIN,
    SDK_STREAM,
    SILENT,
    SLOW,
    AbandonedCall,
    BackgroundCall,
    BalanceChange,
    ChatCall,
    Operation,
    RealtimeCall,
    RedisOutage,
    Restart,
)
from tests.support.gateway_fleet import GatewayFleet, Generation

# How a call ended, as the client saw it.
COMPLETED = "completed"  # 2xx head, the whole answer read (final event / [DONE] / whole JSON body)
CLIENT_CUT = "client_cut"  # 2xx head, the client closed mid-answer
SERVER_CUT = "server_cut"  # 2xx head, the answer ended early (error event, no [DONE], connection lost)
GATEWAY_ERROR = "gateway_error"  # a 5xx head: nothing of an answer delivered
REFUSED = "refused"  # a 4xx head (402 balance, 429, 404 credential, ...): refused before forwarding
UNREACHABLE = "unreachable"  # no head at all (connection refused or dropped before the head)
ABANDONED = "abandoned"  # the client left after sending, before any head (a call the gateway reads on)
ADMITTED = (COMPLETED, CLIENT_CUT, SERVER_CUT)

OPERATION_TIMEOUT = 60.0
HTTP_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
REALTIME_EVENT_TIMEOUT = 15.0
GOING_AWAY = 1001  # the close code of a gateway that stops (a client's own close is answered with 1000)
RESTART_BUSY_WAIT = 3.0
# An abandoned call's client waits this long for a head; the slow provider answers after ABANDON_DELAY.
ABANDON_AFTER = 0.3
ABANDON_DELAY = 1.0
BACKGROUND_MODEL = "responses-steady"


@dataclass(frozen=True, slots=True)
class Tenant:
    """One organization of the mix, as the gateway and the database know it."""

    index: int
    organization_id: str
    api_key: str
    credit_limit_micros: int


@dataclass(slots=True)
class CallRecord:
    """What the client saw of one chat call or realtime session."""

    operation: ChatCall | RealtimeCall | BackgroundCall | AbandonedCall
    request_id: str
    generation: Generation | None = None
    started_at: float = 0.0
    ended_at: float = 0.0
    status: int | None = None
    result: str = UNREACHABLE
    content_events: int = 0  # content deltas received; the fake sends one word (one token) per delta
    reported_output: int | None = None  # completion tokens of the usage the client received
    reported_input: int | None = None  # background: the final usage the provider reports, input tokens
    expected_output: int | None = None  # what the fake reports for this request when it reports usage
    error: str = ""
    # Realtime: response.create events sent, the response.done events received (id, output tokens), refusals.
    creates_sent: int = 0
    responses_done: list[tuple[str, int]] = field(default_factory=list)
    refusals: int = 0
    mint_request_id: str | None = None
    mint_status: int | None = None


@dataclass(slots=True)
class BalanceRecord:
    """An operator's balance change as sent, and what answered it."""

    operation: BalanceChange
    kind: str  # as sent (a credit becomes a top-up where the adjust endpoint is absent)
    status: int | None = None
    reference: str | None = None  # the top-up's invoice id or the adjustment's event id
    skipped: str = ""


@dataclass(slots=True)
class RestartRecord:
    operation: Restart
    ended: Generation | None = None
    busy_at_signal: int = 0
    signalled_at: float = 0.0


@dataclass(slots=True)
class OutageRecord:
    """A Redis outage as the test ran it: monotonic times (0.0: never reached) and what it saw."""

    operation: RedisOutage
    stopped_at: float = 0.0
    degraded_at: float = 0.0  # every live gateway reported serving from its shares
    started_at: float = 0.0  # Redis started again
    reconciled_at: float = 0.0  # every live gateway reported its settlements sent (degraded 0 again)
    problems: list[str] = field(default_factory=list)
    # Degraded mode: gateways served from their shares meanwhile (the floor may give way within the bound of
    # docs/deploy.md); False for a Sentinel failover, where nothing is admitted while no master answers.
    served_from_shares: bool = True
    failed: str = "Redis master"  # what a failover lost (its replica promoted), for the summary
    note: str = ""  # which one it was (a cluster's master of a slot), for the report
    # Set once Redis is down (or the outage gave up): the operations after it wait for it, so the outage
    # meets the mix whatever the wait for the gateways' readings before it took.
    begun: asyncio.Event = field(default_factory=asyncio.Event)
    # Set once it is over: the operations from the next restart on wait for it, so the restarts still meet
    # requests under way rather than a mix the outage saw to its end.
    ended: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(slots=True)
class TrafficLog:
    calls: list[CallRecord] = field(default_factory=list)
    changes: list[BalanceRecord] = field(default_factory=list)
    restarts: list[RestartRecord] = field(default_factory=list)
    outages: list[OutageRecord] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # operations that raised (a bug of the test's client)


def prompt_of(call: ChatCall) -> str:
    return " ".join(f"w{i}" for i in range(call.words))


def chat_body(call: ChatCall) -> dict:
    messages = [{"role": "user", "content": prompt_of(call)}]
    body: dict = {"model": f"chat-{call.behaviour}", "messages": messages}
    if call.cap is not None:
        body["max_tokens"] = call.cap
    if call.n > 1:
        body["n"] = call.n
    if call.style != SDK_PLAIN:
        body["stream"] = True
        if call.include_usage:
            body["stream_options"] = {"include_usage": True}
    return body


class Traffic:
    """Runs a mix with `concurrency` clients at once against `fleet`."""

    def __init__(
        self,
        fleet: GatewayFleet,
        tenants: list[Tenant],
        *,
        operator_token: str,
        default_max_tokens: int,
        realtime_model: str,
        adjust_available: bool,
        concurrency: int,
        finish_background: Callable[[str], dict] | None = None,
        redis_outage: Callable[[OutageRecord], Awaitable[None]] | None = None,
    ) -> None:
        self._fleet = fleet
        # Stops Redis, holds the outage, starts it again and waits for the gateways to reconcile.
        self._redis_outage = redis_outage
        # Restarts and outages never overlap: a process started during an outage never read its headroom
        # (docs/deploy.md, "Redis outages": keep scale-outs and outages apart).
        self._chaos = asyncio.Lock()
        self._outage_records: dict[int, OutageRecord] = {}
        self._after_outage: dict[int, int] = {}  # an outage's index: the index of the first restart after it
        # Ends a background response at the provider (the fake), returning it as a retrieve then shows it.
        self._finish_background = finish_background
        self._tenants = tenants
        self._operator = {"authorization": f"Bearer {operator_token}"}
        self._default_max_tokens = default_max_tokens
        self._realtime_model = realtime_model
        self._adjust = adjust_available
        self._concurrency = concurrency
        self.log = TrafficLog()

    async def run(self, operations: list[Operation]) -> TrafficLog:
        queue: asyncio.Queue[Operation] = asyncio.Queue()
        for operation in operations:
            queue.put_nowait(operation)
            if isinstance(operation, RedisOutage):
                self._outage_records[operation.index] = OutageRecord(operation)
            if isinstance(operation, Restart):
                for index in self._outage_records:
                    self._after_outage.setdefault(index, operation.index)
        workers = [asyncio.create_task(self._worker(queue)) for _ in range(self._concurrency)]
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()
        return self.log

    async def _worker(self, queue: asyncio.Queue[Operation]) -> None:
        while not queue.empty():
            operation = queue.get_nowait()
            try:
                await asyncio.wait_for(self._perform(operation), OPERATION_TIMEOUT)
            except TimeoutError:
                self.log.timed_out.append(repr(operation))
            except Exception as exc:  # one broken operation must not stop the rest of the mix
                self.log.failed.append(f"{operation!r}: {exc!r}")

    async def _perform(self, operation: Operation) -> None:
        for index, outage in self._outage_records.items():
            if index < operation.index:
                await outage.begun.wait()
            if self._after_outage.get(index, operation.index + 1) <= operation.index:
                await outage.ended.wait()
        if isinstance(operation, ChatCall):
            record = CallRecord(operation, operation.request_id)
            self.log.calls.append(record)
            await self._served(record, self._chat)
        elif isinstance(operation, BackgroundCall):
            record = CallRecord(operation, operation.request_id)
            self.log.calls.append(record)
            await self._served(record, self._background)
        elif isinstance(operation, AbandonedCall):
            record = CallRecord(operation, operation.request_id)
            self.log.calls.append(record)
            await self._served(record, self._abandoned)
        elif isinstance(operation, RealtimeCall):
            mint = f"{operation.request_id}-mint"
            record = CallRecord(operation, operation.request_id, mint_request_id=mint)
            self.log.calls.append(record)
            await self._served(record, self._realtime)
        elif isinstance(operation, BalanceChange):
            await self._balance_change(operation)
        elif isinstance(operation, RedisOutage):
            await self._outage(operation)
        else:
            await self._restart(operation)

    async def _served(self, record: CallRecord, perform) -> None:
        generation = await self._fleet.pick(record.operation.gateway)
        record.generation = generation
        with self._fleet.serving(generation):
            record.started_at = time.monotonic()
            try:
                await perform(record, generation.process.base_url)
            except Exception as exc:  # recorded, judged by the audit with the rest
                record.error = record.error or repr(exc)
            finally:
                record.ended_at = time.monotonic()

    # -- chat -----------------------------------------------------------------------------------------

    def _tenant(self, index: int) -> Tenant:
        return self._tenants[index]

    def _sdk(self, http: httpx.AsyncClient, base_url: str, organization: int) -> openai.AsyncOpenAI:
        """The official SDK as the organization's client, without retries."""
        return openai.AsyncOpenAI(
            base_url=f"{base_url}/v1",
            api_key=self._tenant(organization).api_key,
            max_retries=0,
            http_client=http,
        )

    async def _chat(self, record: CallRecord, base_url: str) -> None:
        call: ChatCall = record.operation
        cap = call.cap or self._default_max_tokens
        # A provider ignoring its cap answers (and reports) the whole echo.
        limit = None if call.behaviour == OVERRUNNING else cap
        record.expected_output = echo_reply(prompt_of(call), max_tokens=limit).tokens * call.n
        if call.style in (SDK_STREAM, SDK_PLAIN):
            await self._sdk_chat(record, base_url)
        else:
            await self._raw_chat(record, base_url)

    async def _sdk_chat(self, record: CallRecord, base_url: str) -> None:
        call: ChatCall = record.operation
        body = chat_body(call)
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
            client = self._sdk(http, base_url, call.organization)
            headers = {"x-request-id": record.request_id}
            try:
                answer = await client.chat.completions.create(**body, extra_headers=headers)
            except (openai.APIStatusError, openai.APIConnectionError) as exc:
                _sdk_failure(record, exc)
                return
            record.status = 200
            if call.style == SDK_PLAIN:
                record.content_events = sum(len((c.message.content or "").split()) for c in answer.choices)
                record.reported_output = answer.usage.completion_tokens if answer.usage else None
                record.result = COMPLETED if len(answer.choices) >= 1 else SERVER_CUT
                return
            finished: set[int] = set()
            usage_seen = False
            record.result = SERVER_CUT
            try:
                async for chunk in answer:
                    for choice in chunk.choices:
                        if choice.delta is not None and choice.delta.content:
                            record.content_events += 1
                        if choice.finish_reason:
                            finished.add(choice.index)
                    if chunk.usage is not None:
                        usage_seen = True
                        record.reported_output = chunk.usage.completion_tokens
            except (openai.APIError, httpx.HTTPError) as exc:
                record.error = repr(exc)
                return
            usage_complete = usage_seen or not call.include_usage or call.behaviour == SILENT
            if len(finished) == call.n and usage_complete:
                record.result = COMPLETED

    async def _raw_chat(self, record: CallRecord, base_url: str) -> None:
        call: ChatCall = record.operation
        headers = {
            "authorization": f"Bearer {self._tenant(call.organization).api_key}",
            "x-request-id": record.request_id,
        }
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
            try:
                async with http.stream(
                    "POST", f"{base_url}/v1/chat/completions", json=chat_body(call), headers=headers
                ) as response:
                    record.status = response.status_code
                    if response.status_code >= 300:
                        await response.aread()
                        record.result = REFUSED if response.status_code < 500 else GATEWAY_ERROR
                        return
                    record.result = SERVER_CUT  # until the stream shows it ended well, or the client cuts it
                    try:
                        await self._read_events(record, response)
                    except httpx.HTTPError as exc:
                        record.error = repr(exc)
            except httpx.HTTPError as exc:
                if record.status is None:
                    record.error = repr(exc)
                    record.result = UNREACHABLE

    async def _read_events(self, record: CallRecord, response: httpx.Response) -> None:
        call: ChatCall = record.operation
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                record.result = COMPLETED
                return
            try:
                event = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(event, dict) or "error" in event:
                record.error = data[:200]
                return  # the gateway reported a broken upstream: SERVER_CUT
            for choice in event.get("choices") or ():
                if (choice.get("delta") or {}).get("content"):
                    record.content_events += 1
            if isinstance(event.get("usage"), dict):
                record.reported_output = event["usage"].get("completion_tokens")
            if call.style == RAW_CUT and record.content_events >= call.cut_after:
                record.result = CLIENT_CUT
                return  # leaving the `stream` block closes the connection mid-answer

    # -- late usage: background responses and abandoned calls ------------------------------------------

    async def _background(self, record: CallRecord, base_url: str) -> None:
        call = record.operation
        assert isinstance(call, BackgroundCall)
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
            client = self._sdk(http, base_url, call.organization)
            try:
                created = await client.responses.create(
                    model=BACKGROUND_MODEL,
                    input=" ".join(f"w{i}" for i in range(call.words)),
                    background=True,
                    max_output_tokens=call.cap,
                    extra_headers={"x-request-id": record.request_id},
                )
            except (openai.APIStatusError, openai.APIConnectionError) as exc:
                _sdk_failure(record, exc)
                return
        record.status = 200
        record.result = SERVER_CUT if created.status != "queued" or created.usage is not None else COMPLETED
        if self._finish_background is None or record.result != COMPLETED:
            return
        # The provider runs it now: what it then reports is what the gateway is to charge, once.
        final = await asyncio.to_thread(self._finish_background, created.id)
        record.reported_input = int(final["usage"]["input_tokens"])
        record.reported_output = int(final["usage"]["output_tokens"])

    async def _abandoned(self, record: CallRecord, base_url: str) -> None:
        call = record.operation
        assert isinstance(call, AbandonedCall)
        prompt = " ".join(f"w{i}" for i in range(call.words))
        record.expected_output = echo_reply(prompt, max_tokens=call.cap).tokens
        body = {
            "model": f"chat-{SLOW}",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": call.cap,
        }
        headers = {
            "authorization": f"Bearer {self._tenant(call.organization).api_key}",
            "x-request-id": record.request_id,
        }
        timeout = httpx.Timeout(HTTP_TIMEOUT.connect, read=ABANDON_AFTER)
        async with httpx.AsyncClient(timeout=timeout) as http:
            try:
                reply = await http.post(f"{base_url}/v1/chat/completions", json=body, headers=headers)
            except httpx.ReadTimeout:
                record.result = ABANDONED  # sent, and left before the answer: the gateway reads it on
                return
            except httpx.HTTPError as exc:
                record.error = repr(exc)
                return
        record.status = reply.status_code
        if reply.status_code >= 300:
            record.result = REFUSED if reply.status_code < 500 else GATEWAY_ERROR
        else:
            record.result = COMPLETED  # the provider was quicker than the client's patience
            record.reported_output = (reply.json().get("usage") or {}).get("completion_tokens")

    # -- realtime -------------------------------------------------------------------------------------

    async def _realtime(self, record: CallRecord, base_url: str) -> None:
        call: RealtimeCall = record.operation
        auth = {"authorization": f"Bearer {self._tenant(call.organization).api_key}"}
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
            try:
                minted = await http.post(
                    f"{base_url}/v1/realtime/client_secrets",
                    json={"model": self._realtime_model},
                    headers={**auth, "x-request-id": record.mint_request_id},
                )
            except httpx.HTTPError as exc:
                record.error = f"minting: {exc!r}"
                return
        record.mint_status = minted.status_code
        if minted.status_code != 200:
            record.result = REFUSED if minted.status_code < 500 else GATEWAY_ERROR
            return
        secret = minted.json()["value"]
        timeout = aiohttp.ClientTimeout(total=OPERATION_TIMEOUT, sock_connect=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            try:
                ws = await session.ws_connect(
                    f"{base_url}/v1/realtime",
                    params={"client_secret": secret, "model": self._realtime_model},
                    headers={**auth, "x-request-id": record.request_id},
                )
            except aiohttp.WSServerHandshakeError as exc:
                record.status = exc.status
                record.result = REFUSED if exc.status < 500 else GATEWAY_ERROR
                return
            except aiohttp.ClientError as exc:
                record.error = repr(exc)
                return
            record.status = 101
            record.result = SERVER_CUT
            try:
                if await self._responses(record, ws):
                    record.result = CLIENT_CUT if call.leave_early else COMPLETED
            except (aiohttp.ClientError, ConnectionError) as exc:
                record.error = repr(exc)
            finally:
                with contextlib.suppress(Exception):
                    await ws.close()
            if record.result == CLIENT_CUT and ws.close_code == GOING_AWAY:
                # The gateway's own close (it was stopping) crossed the client's last response.create: a
                # frame that follows a close is never read (RFC 6455 5.5.1), so that one was not forwarded.
                record.result = SERVER_CUT

    async def _responses(self, record: CallRecord, ws: aiohttp.ClientWebSocketResponse) -> bool:
        """Ask for each response and await its end; False when the gateway closed the session first."""
        call: RealtimeCall = record.operation
        for number in range(call.responses):
            event_id = f"{record.request_id}-e{number}"
            await ws.send_str(orjson.dumps({"type": "response.create", "event_id": event_id}).decode())
            record.creates_sent += 1
            if call.leave_early and number == call.responses - 1:
                return True
            while True:
                message = await asyncio.wait_for(ws.receive(), REALTIME_EVENT_TIMEOUT)
                if message.type is not aiohttp.WSMsgType.TEXT:
                    record.error = f"session ended: {message.type.name} {message.data!r}"
                    return False
                event = orjson.loads(message.data)
                if event.get("type") == "response.done":
                    response = event.get("response") or {}
                    output = (response.get("usage") or {}).get("output_tokens", 0)
                    record.responses_done.append((str(response.get("id")), int(output)))
                    break
                if event.get("type") == "error":
                    record.refusals += 1
                    break
        return True

    # -- operator and restarts ------------------------------------------------------------------------

    async def _balance_change(self, change: BalanceChange) -> None:
        kind = change.kind
        if not self._adjust and kind == "credit":
            kind = "top_up"  # the same credit, the only way this gateway offers
        record = BalanceRecord(change, kind)
        self.log.changes.append(record)
        if not self._adjust and kind in ("debit", "set"):
            record.skipped = "the adjust endpoint is absent"
            return
        organization_id = self._tenant(change.organization).organization_id
        generation = await self._fleet.pick(change.gateway)
        base = f"{generation.process.base_url}/api/operator/organizations/{organization_id}"
        if kind == "top_up":
            url, body = f"{base}/top-up", {"amountMicros": change.amount_micros}
        else:
            url = f"{base}/adjust"
            reason = f"conservation test, change {change.index}"
            body = {"kind": kind, "amountMicros": change.amount_micros, "reason": reason}
        async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
            try:
                reply = await http.post(url, json=body, headers=self._operator)
            except httpx.HTTPError as exc:
                record.skipped = f"no answer: {exc!r}"
                return
        record.status = reply.status_code
        if reply.is_success:
            answer = reply.json()
            record.reference = answer["invoice"]["id"] if kind == "top_up" else answer.get("id")

    async def _restart(self, restart: Restart) -> None:
        record = RestartRecord(restart)
        self.log.restarts.append(record)
        # Mid-mix means with requests under way on it: wait (bounded) until some are.
        async with self._chaos:
            record.busy_at_signal = await self._fleet.wait_busy(restart.gateway, 2, RESTART_BUSY_WAIT)
            record.signalled_at = time.monotonic()
            record.ended = await self._fleet.restart(restart.gateway, hard=restart.hard)

    async def _outage(self, outage: RedisOutage) -> None:
        record = self._outage_records[outage.index]
        self.log.outages.append(record)
        try:
            if self._redis_outage is None:
                record.problems.append("the mix has an outage but the setup has no Redis of its own to stop")
                return
            async with self._chaos:
                await self._redis_outage(record)
        finally:
            record.begun.set()
            record.ended.set()


def _sdk_failure(record: CallRecord, exc: openai.APIStatusError | openai.APIConnectionError) -> None:
    """What an SDK call that raised saw: a refusal or failure head, or no head at all."""
    if isinstance(exc, openai.APIStatusError):
        record.status = exc.status_code
        record.result = REFUSED if exc.status_code < 500 else GATEWAY_ERROR
        return
    record.error = repr(exc)
    record.result = UNREACHABLE


async def adjust_endpoint_exists(base_url: str, organization_id: str, operator_token: str) -> bool:
    """Whether POST /api/operator/organizations/{id}/adjust is served: an invalid body is refused with 400
    by the endpoint (nothing changes); a gateway without it answers 404."""
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
        reply = await http.post(
            f"{base_url}/api/operator/organizations/{organization_id}/adjust",
            json={"kind": "no-such-kind"},
            headers={"authorization": f"Bearer {operator_token}"},
        )
    if reply.status_code not in (400, 404, 405):
        raise AssertionError(f"probing the adjust endpoint: unexpected {reply.status_code} {reply.text}")
    return reply.status_code == 400
