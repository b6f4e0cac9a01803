"""What every page shares: the store path, the analysis run shown, cached queries, friendly errors.

Every page shows one analysis run: the one picked in the sidebar, by default the newest; its window,
bucket, threshold and price source head the page, with a warning when its parameters are not the
defaults.

Tenant names are data: pages show them only through dataframes, charts and ``st.text`` (never
markdown or HTML). Behind an authenticating proxy (``--trusted-user-header`` ...), every query runs
on the caller's tenant scope, and a caller without access gets the "no access" page and no data; with
``--trusted-proxy``, only requests whose peer is that proxy are read for headers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import streamlit as st

from analytics.run_parameters import RunDescription
from collector.store_errors import storage_failures
from dashboards.report.data import AnalysisMissing, StoreReader
from dashboards.report.scope import TenantScope, scope_reader
from dashboards.streamlit.access import (
    AccessFile,
    Decision,
    current_options,
    decide,
    load_access_file,
    require_safe_listen,
)
from dashboards.streamlit.launch import DB_ENV, db_path_from
from gpulens.core.errors import UserError


def db_path() -> str:
    """The store this app shows; stops the page with a clear message when none was given."""
    path = db_path_from(sys.argv[1:], os.environ)
    if path is None:
        st.error(f"No store given: start the app with `gpulens dashboard --db FILE` (or set {DB_ENV}).")
        st.stop()
    return path


def request_headers() -> Mapping[str, str]:
    """The headers of this session's request (set by the authenticating proxy in front of the app)."""
    return st.context.headers


def request_peer() -> str | None:
    """The address this session's connection comes from; None for 127.0.0.1 and ::1 (as Streamlit reports
    them) and for a session without a connection."""
    return st.context.ip_address


@st.cache_resource(show_spinner=False, ttl=300)
def _access_file(path: str, mtime_ns: int) -> AccessFile:
    return load_access_file(Path(path))


def caller() -> Decision:
    """What this session may see; without access options, everything (the app as run on a laptop)."""
    try:
        trusted = current_options()
        if trusted is None:
            return Decision(TenantScope.everything(), None)
        require_safe_listen(st.get_option("server.address"), trusted)  # started without `gpulens dashboard`
        try:
            mtime = trusted.access_file.stat().st_mtime_ns
        except OSError:
            mtime = -1
        access = _access_file(str(trusted.access_file), mtime)
    except UserError as exc:
        show_error(exc)
        st.stop()
    return decide(request_headers(), trusted, access, request_peer())


def caller_scope() -> TenantScope:
    """The caller's scope; a caller without access gets the "no access" page and the run stops here."""
    decision = caller()
    if decision.scope is None:
        no_access(decision.reason)
        st.stop()
    assert decision.scope is not None
    return decision.scope


def no_access(reason: str) -> None:
    """The page a caller without access gets: why, and nothing else."""
    st.title("No access")
    st.text(f"gpulens shows each team its own GPUs and costs. This request has no access: {reason}.")


@st.cache_resource(show_spinner=False, ttl=300)
def _reader(path: str, tenants: tuple[str, ...] | None = None, run_id: str | None = None) -> StoreReader:
    """One reader per store and tenant scope, shared by sessions. It opens the file read-only per query
    and closes it, so the app never holds DuckDB's file lock against the collector or ``gpulens analyze``."""
    scope = TenantScope.everything() if tenants is None else TenantScope.of(tenants)
    return scope_reader(StoreReader.per_query(path, run_id), scope)


@st.cache_data(ttl=300, show_spinner=False)
def query(
    path: str, tenants: tuple[str, ...] | None, query_name: str, run_id: str | None, /, **params: Any
) -> pl.DataFrame:
    """Run ``StoreReader.<query_name>(**params)`` on ``path`` for analysis run ``run_id`` (None: the newest)
    within the scope of ``tenants`` (None: all); cached per path, scope, run, query and parameters, so one
    caller's results never reach another scope."""
    with storage_failures(path):  # a damaged block, an I/O error: a StoreError, shown briefly
        return _reader(path, tenants, run_id).run(query_name, **params)


def show_error(exc: UserError) -> None:
    """Show ``exc`` on the page in its short form where it has one (never this server's paths or a stack
    trace); the whole message goes to the server's log."""
    if exc.brief is None:
        st.error(str(exc))
        return
    print(f"gpulens dashboard: error: {exc}", file=sys.stderr, flush=True)
    st.error(exc.brief)


IDLE_RULE = (
    "Idle is decided per sample, not per bucket mean: each sample's held time is idle or active by its own "
    "activity reading against the threshold, weighted by the sample interval; buckets only add up. A sample "
    "without a finite activity reading is unmeasured, never idle or active."
)
"""How held time is split into idle and active, in the words of the report and docs/analytics.md."""


@st.cache_data(ttl=300, show_spinner=False)
def _describe(path: str, run_id: str | None) -> RunDescription:
    with storage_failures(path):
        return _reader(path, None, run_id).describe_run()


def run_picker() -> None:
    """The sidebar's choice of analysis run (default the newest); app.py draws it once per script run."""
    path = db_path_from(sys.argv[1:], os.environ)
    if path is None:
        return
    try:
        runs = query(path, None, "runs", None)
    except UserError:
        return
    ids = runs["run_id"].to_list()
    labels = {
        r["run_id"]: f"{r['run_id']} · {r['window_start']:%Y-%m-%d %H:%M} to {r['window_end']:%Y-%m-%d %H:%M}"
        + (" (newest)" if i == 0 else "")
        for i, r in enumerate(runs.iter_rows(named=True))
    }
    st.sidebar.selectbox("Analysis run", ids, format_func=lambda r: labels[r], key="run")


def selected_run_id() -> str | None:
    """The run picked in the sidebar; None: the newest (or the store has no analysis run)."""
    picked = st.session_state.get("run")
    return str(picked) if picked is not None else None


def run_header() -> None:
    """Say which run the page shows: window, bucket, threshold, price source; warn on non-defaults."""
    run_id = selected_run_id()
    if run_id is None:
        return
    try:
        run = _describe(db_path(), run_id)
    except UserError as exc:
        show_error(exc)
        st.stop()
    st.caption(run.header())
    note = run.non_default_note()
    if note:
        st.warning(note)


def load(query_name: str, /, **params: Any) -> pl.DataFrame:
    """A cached query result for this app's store; a missing analysis or bad store stops the page politely."""
    frame = try_load(query_name, **params)
    if frame is None:
        st.stop()
    assert frame is not None
    return frame


def try_load(query_name: str, /, **params: Any) -> pl.DataFrame | None:
    """Like :func:`load`, but a missing analysis shows its message and returns None (the page goes on)."""
    path = db_path()
    scope = caller_scope()
    try:
        return query(path, scope.key, query_name, selected_run_id(), **params)
    except AnalysisMissing as exc:
        st.info(f"{exc}.")
    except UserError as exc:
        show_error(exc)
        st.stop()
    return None


def overview() -> dict[str, Any]:
    """Fleet size and window (cached like queries)."""
    frame = load("overview")
    return frame.row(0, named=True)


TIME_RANGES: dict[str, timedelta | None] = {
    "whole window": None, "last 24 h": timedelta(hours=24), "last 7 d": timedelta(days=7),
    "last 14 d": timedelta(days=14), "custom": None,
}
"""The sidebar's time ranges; a range ends at the newest point of what a page draws."""


def time_range_picker() -> None:
    """The sidebar's time range, next to the run picker (app.py draws it once per script run)."""
    picked = st.sidebar.selectbox("Time range", list(TIME_RANGES), key="time_range")
    if picked == "custom":
        st.sidebar.date_input("From, to (UTC days)", value=[], key="time_custom")


def in_time_range(frame: pl.DataFrame, column: str) -> pl.DataFrame:
    """``frame``'s rows whose ``column`` lies in the sidebar's time range (all of them for the whole window)."""
    picked = st.session_state.get("time_range") or "whole window"
    if frame.height == 0 or column not in frame.columns:
        return frame
    if picked == "custom":
        days = tuple(st.session_state.get("time_custom") or ())
        if len(days) != 2:
            return frame
        start = datetime.combine(days[0], datetime.min.time())
        end = datetime.combine(days[1], datetime.min.time()) + timedelta(days=1)
        return frame.filter((pl.col(column) >= start) & (pl.col(column) < end))
    span = TIME_RANGES.get(str(picked))
    if span is None:
        return frame
    newest = frame[column].max()
    return frame.filter(pl.col(column) > newest - span)  # type: ignore[operator]


_WORDS = {"ge": "GE", "gpu": "GPU", "gpus": "GPUs", "usd": "(USD)", "ts": "", "uuid": "", "xid": "XID",
          "p95": "P95", "p50": "P50", "id": "ID", "mig": "MIG"}


def human_name(column: str) -> str:
    """A column's name for people: words, not snake case (``idle_ge_hours`` -> ``idle GE-hours``)."""
    name = column.replace("ge_hours", "GE-hours")
    words = [_WORDS.get(w, w) for w in name.split("_")]
    return " ".join(w for w in words if w).strip() or column


def column_config(frame: pl.DataFrame, **given: Any) -> dict[str, Any]:
    """Human names and units for every column of ``frame``: thousands separators, 2 decimals for GE and scores,
    dollars, percentages, times to the minute; ``given`` entries win."""
    out: dict[str, Any] = {}
    for column, dtype in frame.schema.items():
        label = human_name(column)
        if dtype.is_temporal():
            out[column] = st.column_config.DatetimeColumn(label, format="YYYY-MM-DD HH:mm")
        elif dtype.is_float():
            if column.endswith("_usd"):
                out[column] = st.column_config.NumberColumn(label, format="dollar")
            elif column.endswith(("_share", "_ratio")):
                out[column] = st.column_config.NumberColumn(label, format="percent")
            elif column.endswith(("_hours", "_bytes", "_seconds")):
                out[column] = st.column_config.NumberColumn(label, format="localized")
            else:
                out[column] = st.column_config.NumberColumn(label, format="%.2f")
        elif dtype.is_integer():
            out[column] = st.column_config.NumberColumn(label, format="localized")
        else:
            out[column] = st.column_config.Column(label)
    return {**out, **given}


def table(frame: pl.DataFrame, **given: Any) -> None:
    """``frame`` as a table people read at a glance (see :func:`column_config`)."""
    st.dataframe(frame, hide_index=True, width="stretch", column_config=column_config(frame, **given))
