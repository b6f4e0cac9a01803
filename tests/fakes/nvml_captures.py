"""Builds FakeNvml GPUs from real ``nvidia-smi`` captures (tests/fixtures/nvml, MIT, see its README).

Reads the ``-L`` list (MIG profiles and UUIDs), the default table of the ``load`` state (per-GPU power,
temperature, memory, GPU-Util, the MIG devices table with GI/CI ids and per-GI memory, the processes
table with GI/CI ids), and the ``--query-gpu`` CSV (clocks, clock-event reasons, ECC, remapped rows).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from tests.fakes.nvml import FakeGpu, FakeMig, FakeProcess

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"
H100_MIG = FIXTURES / "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
H200_MIG = FIXTURES / "linux-x86_64__nvidia-h200-mig__590.48.01.txt"
H100_NO_MIG = FIXTURES / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"

_GPU_ROW = re.compile(r"^\|\s+(\d+)\s+(.+?)\s{2,}\S+\s+\|")
_STATS_ROW = re.compile(r"^\|\s*\S+\s+(\d+)C\s+\S+\s+(\d+)W\s*/\s*\d+W\s*\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|\s*(\S+)")
_MIG_ROW = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+(\d+)MiB\s*/\s*(\d+)MiB\s+\|\s+(\d+)")
_PROC_ROW = re.compile(r"^\|\s+(\d+)\s+(\d+|N/A)\s+(\d+|N/A)\s+(\d+)\s+[CGM+]+\s+.+?\s+(\d+)MiB\s+\|")
_LIST_GPU = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)")
_LIST_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-f-]+)\)")


def _section(lines: list[str], title: str) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.startswith(f"# {title}"))
    body: list[str] = []
    for line in lines[start + 3:]:
        if line.startswith("####"):
            break
        body.append(line)
    return body


def _query_gpu(lines: list[str], state: str) -> dict[str, str]:
    rows = [line for line in _section(lines, f"{state} :: query-gpu") if line.strip()]
    header, values = list(csv.reader(io.StringIO("\n".join(rows[:2])), skipinitialspace=True))
    return {k.split(" [")[0]: v for k, v in zip(header, values, strict=False)}


def _int_or_none(text: str) -> int | None:
    text = text.split()[0] if text.strip() else text
    return None if text.startswith("[N/A") or text == "N/A" else int(float(text))


def load_capture(path: Path, *, uuid: str | None = None, state: str = "load") -> FakeGpu:
    """One FakeGpu as the capture shows it; ``uuid`` overrides the masked UUID (UUIDs of MIGs derive)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    listing = _section(lines, "capabilities :: list (-L)")
    gpu_match = next(m for m in map(_LIST_GPU.match, listing) if m)
    name, gpu_uuid = gpu_match.group(2), gpu_match.group(3)
    mig_list = {int(m.group(2)): (m.group(1), m.group(3)) for m in map(_LIST_MIG.match, listing) if m}
    table = _section(lines, f"{state} :: nvidia-smi (default table)")
    stats = next(m for m in map(_STATS_ROW.match, table) if m)
    temp, power, used, total, util = stats.groups()
    q = _query_gpu(lines, state)
    migs: list[FakeMig] = []
    for m in map(_MIG_ROW.match, table):
        if not m:
            continue
        _, gi, ci, dev, mig_used, mig_total, _sm = m.groups()
        label, mig_uuid = mig_list[int(dev)]
        migs.append(FakeMig(uuid=mig_uuid, gpu_instance_id=int(gi), compute_instance_id=int(ci), label=label,
                            memory_total_mib=int(mig_total), memory_used_mib=int(mig_used)))
    processes = []
    for m in map(_PROC_ROW.match, table):
        if m:
            _, gi, ci, pid, mem = m.groups()
            processes.append(FakeProcess(
                pid=int(pid), used_mib=int(mem),
                gpu_instance_id=int(gi) if gi != "N/A" else None,
                compute_instance_id=int(ci) if ci != "N/A" else None,
            ))
    gpu = FakeGpu(
        uuid=gpu_uuid,
        name=name,
        memory_total_mib=int(total),
        memory_used_mib=int(used),
        utilization_percent=None if util == "N/A" else int(util.rstrip("%")),
        temperature_c=int(temp),
        power_mw=int(power) * 1000,
        sm_clock_mhz=_int_or_none(q["clocks.current.sm"]),
        memory_clock_mhz=_int_or_none(q["clocks.current.memory"]),
        clock_event_reasons=int(q["clocks_event_reasons.active"], 16),
        ecc_corrected=_int_or_none(q["ecc.errors.corrected.aggregate.total"]),
        ecc_uncorrected=_int_or_none(q["ecc.errors.uncorrected.aggregate.total"]),
        retired_pages=_int_or_none(q["retired_pages.double_bit.count"]),
        remapped_rows_failure=(None if q["remapped_rows.failure"].startswith("[N/A")
                               else q["remapped_rows.failure"].strip() not in ("0", "No")),
        mig_enabled=q["mig.mode.current"].strip() == "Enabled",
        migs=migs,
        processes=processes,
    )
    return gpu.renamed(uuid) if uuid else gpu
