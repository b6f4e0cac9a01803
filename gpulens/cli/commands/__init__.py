"""Sub-commands of ``gpulens``; each module has ``register(app)``. Heavy imports stay inside commands."""

from __future__ import annotations

from types import ModuleType

from gpulens.cli.commands import (
    analyze_cmd,
    collect_cmd,
    dashboard_cmd,
    demo_cmd,
    exporter_cmd,
    plan_cmd,
    recommend_cmd,
    remediate_cmd,
    remediate_serve_cmd,
    report_cmd,
)

COMMAND_MODULES: tuple[ModuleType, ...] = (
    demo_cmd,
    exporter_cmd,
    collect_cmd,
    analyze_cmd,
    recommend_cmd,
    plan_cmd,
    remediate_cmd,
    remediate_serve_cmd,
    report_cmd,
    dashboard_cmd,
)
