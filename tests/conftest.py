"""Suite-wide pytest configuration. Shared helpers live in ``tests/support/``; import them explicitly."""

from __future__ import annotations

import pytest

from tests.support.prometheus import require_binary


@pytest.fixture
def prometheus_binary() -> str:
    """Path of the real ``prometheus`` (skips loudly, or fails under ``CI=true``, when missing)."""
    return require_binary("prometheus")


@pytest.fixture
def promtool_binary() -> str:
    """Path of the real ``promtool`` (skips loudly, or fails under ``CI=true``, when missing)."""
    return require_binary("promtool")
