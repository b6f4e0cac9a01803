"""gpulens Streamlit app: start it with ``gpulens dashboard --db FILE`` (the store is opened read-only)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from dashboards.streamlit.launch import PAGES
from dashboards.streamlit.support import caller, no_access, run_picker, time_range_picker

HERE = Path(__file__).parent

st.set_page_config(page_title="gpulens", page_icon=":material/memory:", layout="wide")
decision = caller()  # behind the proxy: the caller's tenants, or the "no access" page and nothing else
if decision.scope is None:  # every URL of the app shows it (a page's address does not get around it)
    st.navigation([st.Page(lambda: no_access(decision.reason), title="No access", url_path="no-access")]).run()
    st.stop()
scope = decision.scope
assert scope is not None
if scope.tenants is not None:
    st.sidebar.text(f"Showing tenant{'s' if len(scope.tenants) != 1 else ''}: {', '.join(sorted(scope.tenants))}")
navigation = st.navigation(
    [st.Page(str(HERE / path), title=title, icon=icon, default=i == 0) for i, (path, title, icon) in enumerate(PAGES)]
)
run_picker()
time_range_picker()
navigation.run()
