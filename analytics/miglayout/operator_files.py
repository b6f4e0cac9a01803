"""The GPU Operator's side of a layout plan: a mig-parted config, Node label patches and the roll-out order.

The MIG manager reads ``version: v1`` / ``mig-configs:`` (named layouts; per device group
``devices`` (``all`` or GPU indices), ``mig-enabled`` and ``mig-devices`` counts) and applies the one a
Node's ``nvidia.com/mig.config`` label names. One config per changed node lists every GPU of the
node: changed GPUs get their new layout, the others keep what they have, so relabelling changes only
what the plan changes. Nodes with identical configs share one name.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from typing import Any

from analytics.miglayout.fleet import GpuState
from analytics.miglayout.planner import LayoutPlan

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
_MAX_LABEL_VALUE = 63


def node_layouts(plan: LayoutPlan, *, rollback: bool = False) -> dict[str, list[tuple[GpuState, tuple[str, ...]]]]:
    """Per changed node: every GPU of the node with the layout it will have (empty: MIG disabled); with
    ``rollback``, the layout it has today (what re-applying undoes the plan with)."""
    new = {} if rollback else {c.gpu.gpu_uuid: c.layout for c in plan.changes}
    out: dict[str, list[tuple[GpuState, tuple[str, ...]]]] = {}
    for node in plan.nodes_changed:
        gpus = sorted((g for g in plan.gpus if g.node == node),
                      key=lambda g: (g.index if g.index is not None else 1 << 30, g.gpu_uuid))
        out[node] = [(g, new.get(g.gpu_uuid, g.layout)) for g in gpus]
    return out


def _entries(gpus: list[tuple[GpuState, tuple[str, ...]]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for position, (gpu, layout) in enumerate(gpus):
        groups[tuple(sorted(layout))].append(gpu.index if gpu.index is not None else position)
    entries = []
    for layout, indices in sorted(groups.items(), key=lambda kv: min(kv[1])):
        entry: dict[str, Any] = {"devices": "all" if len(groups) == 1 else sorted(indices),
                                 "mig-enabled": bool(layout)}
        if layout:
            entry["mig-devices"] = dict(sorted(Counter(layout).items()))
        entries.append(entry)
    return entries


def _config_name(entries: list[dict[str, Any]]) -> str:
    if len(entries) == 1 and entries[0]["mig-enabled"]:
        parts = [f"{n}x{p}" for p, n in entries[0]["mig-devices"].items()]
        name = "gpulens-all-" + "-".join(parts)
        if len(name) <= _MAX_LABEL_VALUE:
            return name
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:10]
    return f"gpulens-{digest}"


def mig_parted_config(plan: LayoutPlan, *, rollback: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """The mig-parted document and the config name each changed node is to be labelled with; with
    ``rollback``, the same for the layouts the changed nodes have today."""
    configs: dict[str, list[dict[str, Any]]] = {}
    node_config: dict[str, str] = {}
    for node, gpus in node_layouts(plan, rollback=rollback).items():
        entries = _entries(gpus)
        name = _config_name(entries)
        configs[name] = entries
        node_config[node] = name
    return {"version": "v1", "mig-configs": dict(sorted(configs.items()))}, node_config


def node_label_patches(node_config: dict[str, str]) -> list[dict[str, Any]]:
    """One Node patch per changed node, selecting its config (a partial object for server-side apply)."""
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {MIG_CONFIG_LABEL: name}}}
        for node, name in sorted(node_config.items())
    ]


def rollout_readme(plan: LayoutPlan, node_config: dict[str, str], workload_files: dict[str, list[str]]) -> str:
    """The order to roll the plan out, one node at a time (repartitioning ends every process on a GPU)."""
    lines = [
        "# MIG layout plan: how to roll it out",
        "",
        "gpulens never applies these files: changing a GPU's MIG layout resets it and ends every process on it.",
        "Roll one node at a time:",
        "",
        "1. Give the GPU Operator's MIG manager this config: `kubectl create configmap gpulens-mig-parted "
        "-n gpu-operator --from-file=config.yaml=mig-parted.yaml` and point the ClusterPolicy at it "
        "(`spec.migManager.config.name: gpulens-mig-parted`). The device plugin must run with "
        "`mig.strategy: mixed` so each profile is its own resource (`nvidia.com/mig-<profile>`).",
        "2. Cordon and drain the node: `kubectl drain NODE --ignore-daemonsets --delete-emptydir-data`.",
        f"3. Relabel it with its config (table below): `kubectl label node NODE {MIG_CONFIG_LABEL}=CONFIG "
        f"--overwrite`. `node-labels.yaml` holds the same change per node as a server-side-apply patch "
        f"(`kubectl apply --server-side --field-manager gpulens -f -` with that node's document).",
        f"4. Wait for the MIG manager: `kubectl wait node/NODE --for=jsonpath='{{.metadata.labels.nvidia\\.com/"
        f"mig\\.config\\.state}}'=success --timeout=15m` (`{MIG_CONFIG_STATE_LABEL}=failed` means stop and look).",
        "5. Uncordon the node, then apply the workload patches of the workloads placed on it "
        "(`../workloads/`, each file says how).",
        "",
        "To roll back, the same steps with the files of today's state next to these: `mig-parted.rollback.yaml` "
        "(every changed node's current layout), `node-labels.rollback.yaml` and `../workloads/*.rollback.yaml` "
        "(each workload's current resources); give the rollback config to the MIG manager first, patch the "
        "workloads back before relabelling.",
        "",
        "| node | config | GPUs changed | new layouts |",
        "| --- | --- | --- | --- |",
    ]
    for node in plan.nodes_changed:
        changes = [c for c in plan.changes if c.gpu.node == node]
        layouts = "; ".join(sorted({"+".join(c.layout) for c in changes}))
        lines.append(f"| {node} | {node_config[node]} | {len(changes)} | {layouts} |")
    lines += ["", "Workloads placed per node:", ""]
    for node in plan.nodes_changed:
        served = sorted({w for c in plan.changes if c.gpu.node == node for w, _ in c.serves})
        files = sorted({f for w in served for f in workload_files.get(w, [])})
        lines.append(f"- {node}: " + (", ".join(f"`{f}`" for f in files) or "spare instances only"))
    if plan.reused:
        lines += ["", "Already possible without repartitioning (free MIG instances exist):", ""]
        lines += [f"- {r.workload} -> {r.profile} on {r.node}" for r in plan.reused]
    return "\n".join(lines) + "\n"
