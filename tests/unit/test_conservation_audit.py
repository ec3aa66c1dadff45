"""The conservation checks flag what they claim to: each is shown a consistent run (no findings) and the
same run with one thing wrong (a finding naming it)."""

from __future__ import annotations

import dataclasses

from tests.support.conservation_audit import (
    Evidence,
    MicroPrices,
    Opening,
    balance_never_below_the_floor,
    conservation_in_storage,
    events_match_what_was_sent,
    every_delivered_token_charged,
    live_counters_match_storage,
    no_reservation_left_held,
    one_row_per_admitted_request,
)
from tests.support.conservation_mix import (
    OVERRUNNING,
    SDK_STREAM,
    STEADY,
    BalanceChange,
    ChatCall,
    MixShape,
    RedisOutage,
    Restart,
    plan_mix,
)
from tests.support.conservation_traffic import (
    COMPLETED,
    REFUSED,
    BalanceRecord,
    CallRecord,
    OutageRecord,
    Tenant,
    TrafficLog,
)
from tests.support.money_books import (
    BalanceEventRow,
    BalanceWatch,
    Books,
    LedgerRow,
    RedisMoney,
    WatchedOrganization,
)

PRICES = MicroPrices(per_request=5, input=3, cached_input=1, output=11)
TENANT = Tenant(0, "org_a", "sk-test", credit_limit_micros=100)
CALL = ChatCall(1, 0, 0, STEADY, SDK_STREAM, words=4, cap=None, n=1, include_usage=True)
ROW = LedgerRow("chat-0001", 200, "completed", 10, 0, 5, 5 + 10 * 3 + 5 * 11)
TOP_UP = BalanceEventRow("bev_1", 1, "top_up", 500, "inv_1")


def _evidence(**changes) -> Evidence:
    """A run of one organization: opening 1000, a top-up of 500, one completed call costing 90."""
    log = TrafficLog(
        calls=[
            CallRecord(
                CALL, CALL.request_id, status=200, result=COMPLETED, content_events=5, reported_output=5
            )
        ],
        changes=[
            BalanceRecord(BalanceChange(2, 0, 0, "top_up", 500), "top_up", status=201, reference="inv_1")
        ],
    )
    watched = WatchedOrganization(TENANT.organization_id, TENANT.credit_limit_micros)
    watched.stored.offer(1000, -100, 0.1)
    watch = BalanceWatch("sqlite:///unused.db", None, [watched])
    watch.samples = 100
    evidence = Evidence(
        seed=7,
        tenants=[TENANT],
        openings=[Opening(1000, 0)],
        log=log,
        books=[Books(1410, 1, (ROW,), (TOP_UP,))],
        redis=[RedisMoney(1410, 0, {"b": "1410", "r": "0"})],
        watch=watch,
        prices=PRICES,
        settled=True,
    )
    return dataclasses.replace(evidence, **changes)


CHECKS = (
    conservation_in_storage,
    events_match_what_was_sent,
    live_counters_match_storage,
    no_reservation_left_held,
    balance_never_below_the_floor,
    one_row_per_admitted_request,
    every_delivered_token_charged,
)


def test_a_consistent_run_has_no_findings() -> None:
    evidence = _evidence()
    assert {check.__name__: check(evidence) for check in CHECKS} == {check.__name__: [] for check in CHECKS}


def test_a_balance_that_moved_without_a_row_or_event_is_not_conserved() -> None:
    [finding] = conservation_in_storage(_evidence(books=[Books(1400, 1, (ROW,), (TOP_UP,))]))
    assert "stored balance is 1400" in finding and "difference -10" in finding


def test_a_top_up_without_its_event_and_an_event_nobody_sent_are_found() -> None:
    stray = BalanceEventRow("bev_2", 1, "credit", 500, None)
    findings = events_match_what_was_sent(_evidence(books=[Books(1410, 1, (ROW,), (stray,))]))
    assert len(findings) == 2 and "0 balance events" in findings[0] and "nobody sent" in findings[1]


def test_redis_out_of_step_with_storage_or_holding_a_reservation_is_found() -> None:
    evidence = _evidence(redis=[RedisMoney(1500, 40, {"b": "1500", "r": "40"})])
    assert "difference +90" in live_counters_match_storage(evidence)[0]
    assert "40 µ still reserved" in no_reservation_left_held(evidence)[0]


def test_a_sample_below_minus_the_credit_limit_is_found() -> None:
    evidence = _evidence()
    evidence.watch.organizations[0].stored.offer(-101, -100, 2.5)
    [finding] = balance_never_below_the_floor(evidence)
    assert "-101 below its floor -100" in finding


def test_through_a_redis_outage_the_floor_allows_the_documented_bound_from_the_stop_on_only() -> None:
    """Degraded mode: before the stop a sample below the floor is found as ever; from the stop on, one
    down to 2 x the headroom Redis showed in the reading interval before it (here 30 µ) is within the
    bound, one past it is found."""
    evidence = _evidence()
    evidence.log.outages.append(OutageRecord(RedisOutage(3, 5.0), stopped_at=100.0, started_at=105.0))
    watched = evidence.watch.organizations[0]
    watched.headroom_samples += [(90.0, 500), (95.0, 30), (99.0, 10)]  # 90.0: before the reading interval
    watched.margins += [(95.0, "stored balance", 10), (101.0, "stored balance", -60)]
    assert balance_never_below_the_floor(evidence) == []
    watched.margins += [(102.0, "Redis balance", -61), (99.5, "stored balance", -1)]
    findings = sorted(balance_never_below_the_floor(evidence))
    assert len(findings) == 2, findings
    assert "Redis balance 61 µ below its floor after the outage began, past the bound 60 µ" in findings[0]
    assert "stored balance 1 µ below its floor before any outage, past the bound 0 µ" in findings[1]


def test_an_admitted_call_without_a_row_and_a_refused_call_with_a_cost_are_found() -> None:
    refused_call = dataclasses.replace(CALL, index=2)
    log = TrafficLog(
        calls=[
            CallRecord(CALL, CALL.request_id, status=200, result=COMPLETED),
            CallRecord(refused_call, refused_call.request_id, status=402, result=REFUSED),
        ]
    )
    charged_refusal = LedgerRow("chat-0002", 402, "refused", 0, 0, 0, 7)
    findings = one_row_per_admitted_request(
        _evidence(log=log, books=[Books(1410, 1, (charged_refusal,), ())])
    )
    assert len(findings) == 2
    assert "admitted (completed, 200) but 0 rows" in findings[0]
    assert "not admitted (refused, 402) but rows costing [7]" in findings[1]


def test_tokens_other_than_reported_and_a_cost_below_the_tokens_price_are_found() -> None:
    short = dataclasses.replace(ROW, output_tokens=4, cost_micros=5 + 30 + 44)
    undercharged = dataclasses.replace(ROW, cost_micros=80)
    [tokens] = every_delivered_token_charged(_evidence(books=[Books(1421, 1, (short,), (TOP_UP,))]))
    [cost] = every_delivered_token_charged(_evidence(books=[Books(1420, 1, (undercharged,), (TOP_UP,))]))
    assert "upstream reported 5 output tokens, ledger has 4" in tokens
    assert "charged 80 µ" in cost and "which cost 90 µ" in cost


def test_every_planned_mix_has_an_overrun_it_can_charge_before_its_first_disruption() -> None:
    """A mix whose overrunning calls were all cut by the kill or refused 402 exercised no overrun, and the
    audit's coverage check failed it (seed 1448417331): each plan has one on the organization that never runs
    short, before the first outage or restart; other seeds' plans are left as drawn."""
    for shape in (MixShape(), MixShape(gateways=2, redis_outage=5.0)):
        for seed in (*range(1, 200), 1448417331):
            plan = plan_mix(seed, shape)
            calm = next(i for i, op in enumerate(plan) if isinstance(op, RedisOutage | Restart))
            ours = [(i, op) for i, op in enumerate(plan) if isinstance(op, ChatCall) and op.organization == 0]
            overruns = [i for i, op in ours if op.behaviour == OVERRUNNING]
            assert overruns, (seed, shape)
            if any(i < calm for i, _ in ours):  # one before the first disruption whenever it can be
                assert overruns[0] < calm, (seed, shape)
