"""Shared pieces of the Streamlit tests: fresh caches around each test, waiting for a served app."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest
import streamlit as st


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    """Clear Streamlit's data and resource caches before and after the test (import it into a test module)."""
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


def wait_healthy(base: str, proc: subprocess.Popen[str], timeout_s: float = 90.0) -> None:
    """Wait until the app served at ``base`` answers its health check; fail if it exits or takes too long."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            pytest.fail(f"streamlit exited early:\n{proc.stdout.read() if proc.stdout else ''}")
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as resp:
                if resp.read().strip() == b"ok":
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"streamlit did not become healthy within {timeout_s:g} s")
        time.sleep(0.5)
