"""Suite-wide pytest configuration and the expensive fixtures several modules share.

Shared helpers live in ``tests/support/``; import them explicitly. The session fixtures below are built
once per test run (the first xdist worker to ask builds, the others wait and reuse:
``tests.support.shared_build``) and are **read-only** for their users: each checks at the end
of the session that no test wrote to it (size and mtime of every file). A test that must change a store
copies it first (``shutil.copy``; a DuckDB file copies in milliseconds), e.g. ``demo_run.copy_store(tmp_path)``.

- ``demo_run``: one real ``gpulens demo`` (built-in fleet, 15 days at 5 minutes) as a
  :class:`tests.support.demo_run.DemoRun`: ``.out`` (store, ``report/``, ``recommendations/``), ``.store``,
  ``.proc`` (exit status, stdout, stderr).
- ``placement_store``: the built-in fleet's day before ``tests.support.placement_fleet.END`` backfilled at
  5 minutes and analyzed in 5-minute buckets (path of the DuckDB file).
- ``failing_store``: the 20-node fault fleet of ``tests.support.failing_fleet`` (one GPU fails, one degrades,
  one look-alike), 3 days analyzed, as a ``FailingStore`` (``.path``, ``.fleet``).
- ``prometheus_binary`` / ``promtool_binary``: paths of the real binaries (skip loudly, or fail under ``CI=true``).

A test that needs a different scenario builds its own (module-scoped) fixture. The first test to use a
session fixture also pays for building it (or waits for another worker's build), so each test that uses one
gets that build's time on top of its ``timeout`` (``SESSION_BUILD_SECONDS``; add a new session fixture there).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.prometheus import require_binary
from tests.support.read_only import kept_read_only
from tests.support.shared_build import shared_folder

if TYPE_CHECKING:
    from tests.support.demo_run import DemoRun
    from tests.support.failing_fleet import FailingStore


SESSION_BUILD_SECONDS = {"demo_run": 600, "placement_store": 300, "failing_store": 300}
"""Time allowed to build each session fixture (several times what it takes on a loaded 2-core machine)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test that uses a session fixture its build time on top of its timeout (pytest-timeout
    counts fixture setup in the test that triggers it, whichever test of a ``-k`` selection that is)."""
    for item in items:
        extra = sum(s for name, s in SESSION_BUILD_SECONDS.items() if name in getattr(item, "fixturenames", ()))
        marker = item.get_closest_marker("timeout")
        default = config.getoption("timeout", None) or config.getini("timeout") or 0
        base = float(marker.args[0]) if marker and marker.args else float(default)
        if extra and base > 0:
            item.add_marker(pytest.mark.timeout(base + extra))


@pytest.fixture
def prometheus_binary() -> str:
    """Path of the real ``prometheus`` (skips loudly, or fails under ``CI=true``, when missing)."""
    return require_binary("prometheus")


@pytest.fixture
def promtool_binary() -> str:
    """Path of the real ``promtool`` (skips loudly, or fails under ``CI=true``, when missing)."""
    return require_binary("promtool")


# The builders are imported when first used, so that a run of a few light modules does not import them.


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoRun]:
    """One ``gpulens demo`` per test run, read-only (its exit status is the reader's to check)."""
    from tests.support.demo_run import read_demo, record_demo

    run = read_demo(shared_folder(tmp_path_factory, "demo", record_demo))
    with kept_read_only(run.out):
        yield run


@pytest.fixture(scope="session")
def placement_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The analyzed simulated day of :mod:`tests.support.placement_fleet`, read-only."""
    from tests.support.placement_fleet import build_placement_store

    folder = shared_folder(tmp_path_factory, "placement", lambda f: build_placement_store(f / "fleet.duckdb"))
    with kept_read_only(folder):
        yield folder / "fleet.duckdb"


@pytest.fixture(scope="session")
def failing_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FailingStore]:
    """The analyzed fault fleet of :mod:`tests.support.failing_fleet`, read-only."""
    from tests.support.failing_fleet import FailingStore, build_failing_store, failing_fleet

    folder = shared_folder(tmp_path_factory, "failing", lambda f: build_failing_store(f / "gpulens.duckdb"))
    with kept_read_only(folder):
        yield FailingStore(folder / "gpulens.duckdb", failing_fleet())


@pytest.fixture
def on_loopback() -> Iterator[None]:
    """The dashboard's server address as `gpulens dashboard --host 127.0.0.1` sets it (Streamlit's AppTest
    serves nothing), so trusted identity headers are honoured as behind a proxy on the same host."""
    from streamlit import config

    config.set_option("server.address", "127.0.0.1")
    yield
    config.set_option("server.address", None)
