"""A failure's time is when it was seen to begin: a failure already there at the window's first reading began
before anyone measured it, so it gives no lead; one that began later in the window, on any day, does."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import duckdb
import pytest

from analytics import health
from analytics.day_parts import day_windows
from analytics.facts import Window
from analytics.health import Evidence, GpuHealth
from analytics.result_tables import create_result_tables
from analytics.settings import HealthRules
from collector.schema import create_schema

START = datetime(2026, 1, 5, 12, 0)


def readings(states: str, *, column: str = "remapped_rows_failure", step: int = 3600) -> list[dict[str, Any]]:
    """One GPU's hourly samples from ``START``: per hour ``F`` failed, ``.`` not failed, ``?`` not read."""
    out = []
    for i, c in enumerate(states):
        value = {"F": True, ".": False, "?": None}[c]
        if column == "up":
            value = None if value is None else not value
        out.append({"ts": START + timedelta(seconds=i * step), column: value})
    return out


def window_row(samples: list[dict[str, Any]], hours: int) -> tuple[Any, ...]:
    """The window-level health row of GPU-A over ``hours`` from ``START``, from its day parts."""
    con = duckdb.connect()
    create_schema(con)
    create_result_tables(con)
    for s in samples:
        con.execute(
            "INSERT INTO gpu_samples (node, source, ts, gpu_uuid, up, remapped_rows_failure) VALUES ('n', 't', ?, 'GPU-A', ?, ?)",
            [s["ts"], s.get("up", True), s.get("remapped_rows_failure")],
        )
    con.execute("CREATE VIEW f_gpu_samples AS SELECT * FROM gpu_samples")
    window = Window(START, START + timedelta(hours=hours), 3600)
    for n, span in enumerate(day_windows(window)):
        health.insert_part_health(con, f"p{n}", span, HealthRules())
    con.execute("CREATE TEMP TABLE an_health AS SELECT * EXCLUDE (part_id) FROM part_health")
    (row,) = con.execute(health.WINDOW_HEALTH).fetchall()
    return row


def remap(row: tuple[Any, ...]) -> tuple[Any, Any]:
    """(first failed reading, failure onset) of a window row."""
    return row[4], row[5]


def lost(row: tuple[Any, ...]) -> tuple[Any, Any]:
    return row[7], row[9]


def at(hour: int) -> datetime:
    return START + timedelta(hours=hour)


def test_a_failure_already_there_at_the_first_reading_has_no_onset_but_a_later_one_does() -> None:
    # failed when the window opens (12:00 .. 15:00), replaced, failed again at 21:00 (the same day)
    assert remap(window_row(readings("FFFF.....FFF"), 12)) == (at(0), at(9))


def test_a_failure_that_never_ended_has_no_onset() -> None:
    assert remap(window_row(readings("FFFFFFFFFFFFFFFF"), 16)) == (at(0), None)


def test_a_failure_seen_first_at_a_days_first_reading_began_that_day_when_the_day_before_ended_without_it() -> None:
    # 12:00 .. 23:00 not failed, then failed from midnight (the next day part's first reading)
    assert remap(window_row(readings("............FFFF"), 16)) == (at(12), at(12))
    # the same with the day before ending failed: the failure did not begin at midnight
    assert remap(window_row(readings("FFFFFFFFFFFFFFFF"), 16)) == (at(0), None)


def test_readings_that_were_not_sent_do_not_make_an_onset() -> None:
    # an unsent reading between two failed ones is not "not failed"; after a not-failed one, the failure began
    assert remap(window_row(readings("F??F..?F"), 8)) == (at(0), at(7))
    # the day before midnight ends unread: the failure at midnight may have been there all along
    assert remap(window_row(readings("FFFFFFFFFF??FF"), 14)) == (at(0), None)
    assert remap(window_row(readings(".........???FF"), 14)) == (at(12), at(12))


def test_a_lost_gpu_is_timed_the_same_way() -> None:
    assert lost(window_row(readings("FF..F", column="up"), 5)) == (at(0), at(4))
    assert lost(window_row(readings("FFFFF", column="up"), 5)) == (at(0), None)


@pytest.mark.parametrize(("onset", "lead"), [(None, None), (at(10), 3600.0)])
def test_the_lead_is_measured_to_the_failure_that_began_after_the_warning(onset: datetime | None,
                                                                           lead: float | None) -> None:
    warned = at(9)
    g = GpuHealth("n0", "GPU-A", "drain", (
        Evidence("trend_hardware_xids_per_hour", 2.0, 0.1, "watch", "rising", at(4), warned),
        Evidence("row_remap_failure", 1, None, "drain", "row remapping failed", at(0), at(11), onset),
    ))
    assert g.failure_ts == onset
    assert g.lead_seconds == lead
