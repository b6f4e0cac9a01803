"""Small PromQL helpers for checking dashboards and rules: Grafana variable substitution, metric names.

Not a PromQL parser: promtool checks syntax. These helpers only find which metric names an
expression reads, so tests can compare them with docs/metrics.md and the recording rules.
"""

from __future__ import annotations

import re

# Values that make a Grafana-templated query plain PromQL (what promtool can check).
GRAFANA_SAMPLE_VALUES: dict[str, str] = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range_s": "86400",
    "__range": "1d",
    "tenant": ".*",
    "node": ".*",
    "gpu": ".*",
    "price_per_gpu_hour": "2.5",
}

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
     "atan2", "inf", "nan", "Inf", "NaN"}
)


def substitute_grafana_variables(expr: str, values: dict[str, str] | None = None) -> str:
    """Replace ``$var`` / ``${var}`` / ``${var:format}`` with sample values; unknown names raise KeyError."""
    table = GRAFANA_SAMPLE_VALUES if values is None else values

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in table:
            raise KeyError(f"no sample value for Grafana variable ${name} in {expr!r}")
        return table[name]

    return _VARIABLE.sub(replace, expr)


def metric_names(expr: str) -> set[str]:
    """Names of the metrics (and recorded series) an expression selects."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGES.sub("", text)
    text = _GROUPING.sub("", text)
    names: set[str] = set()
    for match in _IDENTIFIER.finditer(text):
        name, is_call = match.group(1), match.group(2)
        if is_call or name in _KEYWORDS:
            continue
        names.add(name)
    return names
