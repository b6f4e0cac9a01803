"""gpulens Streamlit app: start it with ``gpulens dashboard --db FILE`` (the store is opened read-only)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from gpulens.dashboards.streamlit.launch import PAGES
from gpulens.dashboards.streamlit.support import run_picker

HERE = Path(__file__).parent

st.set_page_config(page_title="gpulens", page_icon=":material/memory:", layout="wide")
navigation = st.navigation(
    [st.Page(str(HERE / path), title=title, icon=icon, default=i == 0) for i, (path, title, icon) in enumerate(PAGES)]
)
run_picker()
navigation.run()
