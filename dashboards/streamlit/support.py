"""What every page shares: the store path, the cached read-only reader, cached queries, friendly errors.

Tenant names are data: pages show them only through dataframes, charts and ``st.text`` (never
markdown or HTML).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import polars as pl
import streamlit as st

from gpulens.analytics.report.data import AnalysisMissing, StoreReader
from gpulens.core.errors import UserError
from gpulens.dashboards.streamlit.launch import DB_ENV, db_path_from


def db_path() -> str:
    """The store this app shows; stops the page with a clear message when none was given."""
    path = db_path_from(sys.argv[1:], os.environ)
    if path is None:
        st.error(f"No store given: start the app with `gpulens dashboard --db FILE` (or set {DB_ENV}).")
        st.stop()
    return path


@st.cache_resource(show_spinner=False)
def _reader(path: str) -> StoreReader:
    """One reader per store, shared by sessions. It opens the file read-only per query and closes it,
    so the app never holds DuckDB's file lock against the collector or ``gpulens analyze``."""
    return StoreReader.per_query(path)


@st.cache_data(ttl=300, show_spinner=False)
def query(path: str, query_name: str, /, **params: Any) -> pl.DataFrame:
    """Run ``StoreReader.<query_name>(**params)`` on ``path``; cached per path, query and parameters."""
    return _reader(path).run(query_name, **params)


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
    try:
        return query(path, query_name, **params)
    except AnalysisMissing as exc:
        st.info(f"{exc}.")
    except UserError as exc:
        st.error(str(exc))
        st.stop()
    return None


def overview() -> dict[str, Any]:
    """Fleet size and window (cached like queries)."""
    frame = load("overview")
    return frame.row(0, named=True)
