"""gpulens Streamlit app: start it with ``gpulens dashboard --db FILE`` (the store is opened read-only)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent

PAGES = (
    ("views/fleet.py", "Fleet capacity", ":material/monitoring:"),
    ("views/tenants.py", "Tenants", ":material/groups:"),
    ("views/risk.py", "Isolation risk", ":material/shield:"),
    ("views/recommendations.py", "Recommendations", ":material/tune:"),
    ("views/health.py", "Health", ":material/health_and_safety:"),
)
"""Page script (relative to this file), title and icon, in navigation order."""

st.set_page_config(page_title="gpulens", page_icon=":material/memory:", layout="wide")
navigation = st.navigation(
    [st.Page(str(HERE / path), title=title, icon=icon, default=i == 0) for i, (path, title, icon) in enumerate(PAGES)]
)
navigation.run()
