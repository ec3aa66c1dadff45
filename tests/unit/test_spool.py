"""The ledger's write-ahead spool on a real directory: appends, adoption of dead processes' files, locks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from modelgate.config import ConfigError, load_config
from modelgate.infra.spool import Spool, SpoolError, database_identity, default_spool_dir

DATABASE = "sqlite:/srv/modelgate.db"


def _spool(directory: Path, database: str = DATABASE, fsync: str = "never") -> Spool:
    spool = Spool(directory, database, fsync=fsync, fsync_interval=1.0)
    directory.mkdir(parents=True, exist_ok=True)
    return spool


def _line(n: int) -> bytes:
    return orjson.dumps([f"led_{n}", "org", n]) + b"\n"


def test_rows_are_read_back_in_the_order_they_were_appended(tmp_path: Path) -> None:
    spool = _spool(tmp_path)
    spool_file = spool.new_file()
    for n in range(5):
        spool_file.append(_line(n))
    assert [row[0] for row in spool.rows(spool_file)] == [f"led_{n}" for n in range(5)]


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    spool = _spool(tmp_path)
    spool_file = spool.new_file()
    spool_file.append(_line(1))
    spool_file.append(b'["led_2", "or')  # what a machine crash in the middle of a write leaves
    assert [row[0] for row in spool.rows(spool_file)] == ["led_1"]


def test_a_live_process_file_is_not_adopted(tmp_path: Path) -> None:
    live = _spool(tmp_path)
    live.new_file().append(_line(1))
    assert _spool(tmp_path).adopt_orphans() == []


async def test_a_released_file_is_adopted_once(tmp_path: Path) -> None:
    dead = _spool(tmp_path)
    dead.new_file().append(_line(1))
    await dead.close()  # what the death of the process does to its locks
    first, second = _spool(tmp_path), _spool(tmp_path)
    adopted = first.adopt_orphans()
    assert len(adopted) == 1
    assert [row[0] for row in first.rows(adopted[0])] == ["led_1"]
    assert second.adopt_orphans() == []  # the first adopter holds it now


async def test_a_file_of_another_database_is_left_alone(tmp_path: Path) -> None:
    other = _spool(tmp_path, database="postgresql://db.example:5432/other")
    other.new_file().append(_line(1))
    await other.close()
    assert _spool(tmp_path).adopt_orphans() == []
    assert len(os.listdir(tmp_path)) == 1


async def test_removing_a_file_deletes_it(tmp_path: Path) -> None:
    spool = _spool(tmp_path)
    spool_file = spool.new_file()
    await spool.remove(spool_file)
    assert os.listdir(tmp_path) == []


def test_fsync_always_leaves_nothing_unsynced(tmp_path: Path) -> None:
    spool_file = _spool(tmp_path, fsync="always").new_file()
    spool_file.append(_line(1))
    assert not spool_file.dirty


def test_an_unwritable_directory_is_a_spool_error(tmp_path: Path) -> None:
    spool = _spool(tmp_path / "gone")
    (tmp_path / "gone").rmdir()
    with pytest.raises(SpoolError):
        spool.new_file()


def test_an_unknown_fsync_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Spool(tmp_path, DATABASE, fsync="sometimes", fsync_interval=1.0)


def test_rows_appended_without_fsync_survive_sigkill(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        from modelgate.infra.spool import Spool
        spool = Spool(Path({str(tmp_path)!r}), {DATABASE!r}, fsync="never", fsync_interval=1.0)
        spool_file = spool.new_file()
        for n in range(1000):
            spool_file.append(b'["led_%d"]\\n' % n)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    child = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2], timeout=60)
    assert child.returncode == -signal.SIGKILL
    adopted = _spool(tmp_path).adopt_orphans()
    assert len(adopted) == 1
    rows = list(_spool(tmp_path).rows(adopted[0]))
    assert [row[0] for row in rows] == [f"led_{n}" for n in range(1000)]


def test_the_default_directory_is_next_to_the_sqlite_file_or_in_the_working_directory(
    tmp_path: Path,
) -> None:
    assert (
        default_spool_dir(f"sqlite:///{tmp_path / 'data' / 'gw.db'}") == tmp_path / "data" / "modelgate-spool"
    )
    assert default_spool_dir("postgresql://u:p@db:5432/gw") == Path(os.getcwd()) / "modelgate-spool"


def test_the_database_identity_leaves_out_credentials() -> None:
    assert database_identity("postgresql://user:secret@db.example:6432/gw?sslmode=require") == (
        "postgresql://db.example:6432/gw"
    )
    assert database_identity("sqlite:////srv/gw.db") == "sqlite:/srv/gw.db"


def test_the_database_identity_of_a_primary_and_its_replicas_names_every_host() -> None:
    url = "postgresql://gw:secret@DB-A:5433,db-b,[::1]/gw?target_session_attrs=read-write"
    assert database_identity(url) == "postgresql://db-a:5433,db-b:5432,[::1]:5432/gw"
    assert database_identity("postgres://db") == "postgresql://db:5432/"


def test_spool_settings_are_validated_with_every_problem_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        "[billing]\n"
        'spool_fsync = "sometimes"\n'
        "spool_fsync_interval_seconds = 0\n"
        "ledger_max_queue = 0\n"
        "spool_dir = 7\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    problems = "\n".join(caught.value.problems)
    for key in ("spool_fsync", "spool_fsync_interval_seconds", "ledger_max_queue", "spool_dir"):
        assert f"billing.{key}:" in problems
    assert "always, interval, never" in problems


def test_spool_settings_have_their_documented_defaults() -> None:
    billing = load_config(None, env={}).billing  # the embedded defaults set no spool keys
    assert (billing.spool_dir, billing.spool_fsync, billing.spool_fsync_interval_seconds) == (
        "",
        "interval",
        1.0,
    )
    assert billing.ledger_max_queue == 100000
