"""The HTML/CSV/Parquet report and the read-only store queries the Streamlit app shares."""

from dashboards.report.writer import write_report

__all__ = ["write_report"]
