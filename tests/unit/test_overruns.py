"""Overruns are counted and audited every time, and warned about at most once per organization and minute."""

from __future__ import annotations

import logging

import pytest

from modelgate.domain.overruns import IMPLAUSIBLE_USAGE, OVER_RESERVATION, Overrun, OverrunReport


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Audit:
    def __init__(self) -> None:
        self.entries: list = []

    def add(self, entry) -> None:
        self.entries.append(entry)


def _overrun(organization: str = "org_a", implausible: bool = False) -> Overrun:
    return Overrun(organization, "key_1", None, "chat", "m", "req_1", 230, 40_025, 39_795, implausible, 0)


def test_each_overrun_is_counted_and_audited_but_warned_once_per_organization_and_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, audit, counted = Clock(), Audit(), []
    report = OverrunReport(audit, lambda *args: counted.append(args), clock)  # type: ignore[arg-type]

    with caplog.at_level(logging.WARNING, logger="modelgate.billing"):
        report.report(_overrun())
        report.report(_overrun())
        report.report(_overrun("org_b"))
        clock.now += 59.0
        report.report(_overrun())
        clock.now += 1.0
        report.report(_overrun())

    assert len(counted) == 5 and counted[0] == ("m", 39_795, False)
    assert [entry.event for entry in audit.entries] == [OVER_RESERVATION] * 5
    assert audit.entries[0].details["overMicros"] == 39_795
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [("org_b" in line, "org_a" in line) for line in warned] == [
        (False, True),
        (True, False),
        (False, True),
    ]


def test_implausible_usage_is_audited_and_logged_as_an_error_every_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    audit = Audit()
    report = OverrunReport(audit, None, Clock())  # type: ignore[arg-type]

    with caplog.at_level(logging.WARNING, logger="modelgate.billing"):
        report.report(_overrun(implausible=True))
        report.report(_overrun(implausible=True))

    assert [entry.event for entry in audit.entries] == [IMPLAUSIBLE_USAGE] * 2
    assert [r.levelno for r in caplog.records] == [logging.ERROR] * 2
