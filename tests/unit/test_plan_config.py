"""The config keys of registration control and plans: `[cabinet] registration`, `[[plans]] self_service` and
`monthly_allowance`, their defaults and their validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelgate.config import ConfigError, load_config

_BASE = """
[[providers]]
name = "mock"
kind = "mock"

[[models]]
name = "m"
kinds = ["chat"]
[[models.rows]]
provider = "mock"
"""


def _load(tmp_path: Path, text: str):
    path = tmp_path / "c.toml"
    path.write_text(_BASE + text)
    return load_config(path, env={})


def test_registration_is_open_and_only_plans_without_credit_are_self_service_by_default(
    tmp_path: Path,
) -> None:
    config = _load(
        tmp_path,
        '[[plans]]\ncode = "free"\n[[plans]]\ncode = "credit"\ncredit_limit = 10.0\n'
        '[[plans]]\ncode = "opened"\ncredit_limit = 10.0\nself_service = true\n'
        '[[plans]]\ncode = "closed"\nself_service = false\nmonthly_allowance = 2.5\n',
    )

    assert config.cabinet.registration == "open"
    assert [(p.code, p.self_service) for p in config.plans] == [
        ("free", True),
        ("credit", False),
        ("opened", True),
        ("closed", False),
    ]
    assert [p.monthly_allowance for p in config.plans] == [0.0, 0.0, 0.0, 2.5]


@pytest.mark.parametrize("mode", ["open", "invite_only", "closed"])
def test_each_registration_mode_loads(tmp_path: Path, mode: str) -> None:
    config = _load(tmp_path, f'[cabinet]\nregistration = "{mode}"\n[[plans]]\ncode = "free"\n')

    assert config.cabinet.registration == mode


def test_bad_values_are_reported_together_with_their_key_paths(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(
            tmp_path,
            '[cabinet]\nregistration = "invite"\n'
            '[[plans]]\ncode = "free"\nmonthly_allowance = -1.0\nself_service = "yes"\n',
        )

    message = str(caught.value)
    assert "cabinet.registration: unknown registration mode 'invite'; did you mean 'invite_only'?" in message
    assert "plans[0].monthly_allowance: must be at least 0" in message
    assert "plans[0].self_service: expected a boolean, got string 'yes'" in message
