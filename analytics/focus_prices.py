"""Effective USD per GPU-hour per GPU model from a FOCUS 1.2/1.3 cloud bill (CSV or Parquet).

Usage rows of GPU instances are kept (``ChargeCategory = Usage``, quantity in hours); the instance type
comes from ``SkuPriceDetails`` or ``Tags`` (``InstanceType``, ``node.kubernetes.io/instance-type`` ...) or a
provider column (``x_InstanceType``, AWS ``x_UsageType`` such as ``USE1-BoxUsage:p5.48xlarge``), and maps
to GPUs by ``instance_gpus.yaml`` (``p5.48xlarge`` = 8 x H100) plus the user's additions. Per model:
the effective price is ``EffectiveCost`` (amortized, commitment discounts included) / GPU-hours, the list
price ``ListCost`` / GPU-hours, and the committed share the GPU-hours under a commitment
(``CommitmentDiscountId`` set). Unused commitment (``CommitmentDiscountStatus = Unused``) buys no
GPU-hour of the cluster: it is reported, not priced in.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path

import duckdb
import yaml

from analytics.prices import Price
from collector.parquet import read_parquet_file
from gpulens.core.errors import UserError
from gpulens.core.mig_catalog import short_model

REQUIRED = ("ChargeCategory", "ChargePeriodStart", "ChargePeriodEnd", "EffectiveCost")
OPTIONAL = ("ListCost", "PricingQuantity", "PricingUnit", "ConsumedQuantity", "ConsumedUnit", "SkuPriceDetails",
            "Tags", "x_InstanceType", "x_UsageType", "CommitmentDiscountId", "CommitmentDiscountStatus")
INSTANCE_KEYS = ("InstanceType", "instanceType", "x_InstanceType", "x_instance_type", "VMSize", "MachineType",
                 "node.kubernetes.io/instance-type")
"""Keys of ``SkuPriceDetails`` and ``Tags`` that name the instance type, in the order they are tried."""
_USAGE_TYPE = re.compile(r"(?:BoxUsage|SpotUsage|DedicatedUsage|HostUsage|Reservation)[^:]*:(?P<type>[\w.\-]+)$")
_MAPPING = re.compile(r"^(?P<type>[^=\s]+)=(?P<gpus>[0-9]+)\s*[xX*]\s*(?P<model>\S+)$")


@dataclass(frozen=True)
class InstanceGpus:
    gpus: int
    model: str


def instance_table(extra: Mapping[str, InstanceGpus] | None = None) -> dict[str, InstanceGpus]:
    """The packaged instance type -> GPUs table, the user's additions (``--instance-type``) over it."""
    text = resources.files("analytics").joinpath("instance_gpus.yaml").read_text(encoding="utf-8")
    table = {str(k): InstanceGpus(int(v["gpus"]), short_model(str(v["model"]))) for k, v in yaml.safe_load(text).items()}
    table.update(extra or {})
    return table


def parse_mapping(text: str) -> tuple[str, InstanceGpus]:
    """``gpu-box-8=8xH100`` -> (``gpu-box-8``, 8 x H100); a malformed one is a UserError."""
    m = _MAPPING.match(text.strip())
    if not m or int(m["gpus"]) < 1:
        raise UserError(f"--instance-type {text!r} is not like p5.48xlarge=8xH100 (TYPE=COUNTxMODEL)")
    return m["type"], InstanceGpus(int(m["gpus"]), short_model(m["model"]))


@dataclass(frozen=True)
class BilledModel:
    """What a bill says one GPU model cost: GPU-hours, effective and list dollars, the committed part."""

    model: str
    gpu_hours: float
    effective_usd: float
    list_usd: float | None
    committed_gpu_hours: float
    instance_types: tuple[str, ...]
    period_start: datetime
    period_end: datetime

    @property
    def effective_per_gpu_hour(self) -> float:
        return self.effective_usd / self.gpu_hours

    @property
    def list_per_gpu_hour(self) -> float:
        return self.effective_per_gpu_hour if self.list_usd is None else self.list_usd / self.gpu_hours

    @property
    def committed_share(self) -> float:
        return self.committed_gpu_hours / self.gpu_hours

    def price(self, bill: str, valid_to: datetime | None) -> Price:
        """The book's entry: list and effective price, valid from the bill's first charge period."""
        types = ", ".join(self.instance_types)
        return Price(self.model, round(self.list_per_gpu_hour, 6), round(self.effective_per_gpu_hour, 6),
                     f"FOCUS bill {bill} ({types}; {self.period_start:%Y-%m-%d} .. {self.period_end:%Y-%m-%d})",
                     self.period_start, valid_to, round(self.committed_share, 6))


@dataclass(frozen=True)
class FocusPrices:
    """The GPU prices a bill gives, and what it could not price."""

    models: tuple[BilledModel, ...]
    unmapped_usd: dict[str, float]
    """Instance type -> effective cost of usage rows whose type is in no mapping (GPU or not)."""
    unused_commitment_usd: float
    rows: int


def read_focus_prices(path: Path, instances: Mapping[str, InstanceGpus]) -> FocusPrices:
    """Read a FOCUS bill at ``path`` (``.csv``, ``.csv.gz`` or ``.parquet``) into prices per GPU model."""
    if not path.is_file():
        raise UserError(f"the FOCUS bill {path} does not exist or is not a file")
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        try:
            if path.suffix.lower() == ".parquet":
                read_parquet_file(con, path).create_view("bill")
            else:
                con.read_csv(str(path), header=True, all_varchar=True).create_view("bill")
            columns = {str(r[0]) for r in con.execute("DESCRIBE bill").fetchall()}
        except duckdb.Error as exc:
            raise UserError(f"the FOCUS bill {path} cannot be read as {path.suffix or 'CSV'}: "
                            f"{str(exc).splitlines()[0]}") from exc
        missing = [c for c in REQUIRED if c not in columns]
        if missing or not ({"PricingQuantity", "PricingUnit"} <= columns or {"ConsumedQuantity", "ConsumedUnit"} <= columns):
            need = ", ".join(missing) or "PricingQuantity/PricingUnit or ConsumedQuantity/ConsumedUnit"
            raise UserError(f"the FOCUS bill {path} lacks the column(s) {need}: is it a FOCUS 1.2/1.3 export?")
        rows = con.execute(_grouped_sql(columns)).fetchall()
        total = con.execute("SELECT count(*) FROM bill").fetchone()
    finally:
        con.close()
    return _prices(rows, instances, int(total[0]) if total else 0)


def _col(columns: set[str], name: str) -> str:
    return f'CAST("{name}" AS VARCHAR)' if name in columns else "NULL::VARCHAR"


def _grouped_sql(columns: set[str]) -> str:
    """Usage rows, their hours summed per instance-type evidence and commitment (column names are ours)."""
    def num(name: str) -> str:
        return f"TRY_CAST({_col(columns, name)} AS DOUBLE)"

    def hours(unit: str) -> str:
        u = f"lower(trim({_col(columns, unit)}))"
        return f"({u} LIKE '%hour%' OR {u} IN ('h', 'hr', 'hrs'))"

    quantity = (f"CASE WHEN {hours('ConsumedUnit')} THEN {num('ConsumedQuantity')} "
                f"WHEN {hours('PricingUnit')} THEN {num('PricingQuantity')} END")
    return f"""
        SELECT {_col(columns, 'SkuPriceDetails')}, {_col(columns, 'Tags')}, {_col(columns, 'x_InstanceType')},
               {_col(columns, 'x_UsageType')}, {_col(columns, 'CommitmentDiscountId')} IS NOT NULL AS committed,
               coalesce(lower({_col(columns, 'CommitmentDiscountStatus')}), '') = 'unused' AS unused,
               sum({quantity}), sum({num('EffectiveCost')}), sum({num('ListCost')}),
               count({num('ListCost')}) = count(*),
               min(timezone('UTC', TRY_CAST({_col(columns, 'ChargePeriodStart')} AS TIMESTAMPTZ))),
               max(timezone('UTC', TRY_CAST({_col(columns, 'ChargePeriodEnd')} AS TIMESTAMPTZ)))
        FROM bill
        WHERE lower({_col(columns, 'ChargeCategory')}) = 'usage'
        GROUP BY ALL
    """  # noqa: S608 - column names are the FOCUS constants above


def instance_type(sku_details: str | None, tags: str | None, x_type: str | None, usage_type: str | None) -> str | None:
    """The instance type a usage row bills, from the first place that names one."""
    for text in (sku_details, tags):
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = None
        if isinstance(data, dict):
            for key in INSTANCE_KEYS:
                if data.get(key):
                    return str(data[key])
    if x_type:
        return x_type
    m = _USAGE_TYPE.search(usage_type or "")
    return m["type"] if m else None


@dataclass
class _Sums:
    """One model's running sums while the bill is read."""

    start: datetime
    end: datetime
    gpu_hours: float = 0.0
    effective: float = 0.0
    listed: float | None = 0.0
    committed: float = 0.0
    types: set[str] = field(default_factory=set)

    def add(self, itype: str, gpu_hours: float, effective: float, listed: float | None, committed: bool,
            start: datetime, end: datetime) -> None:
        self.gpu_hours += gpu_hours
        self.effective += effective
        self.listed = None if self.listed is None or listed is None else self.listed + listed
        self.committed += gpu_hours if committed else 0.0
        self.types.add(itype)
        self.start, self.end = min(self.start, start), max(self.end, end)

    def billed(self, model: str) -> BilledModel:
        return BilledModel(model, self.gpu_hours, self.effective, self.listed, self.committed,
                           tuple(sorted(self.types)), self.start, self.end)


def _prices(rows: list[tuple], instances: Mapping[str, InstanceGpus], total_rows: int) -> FocusPrices:
    sums: dict[str, _Sums] = {}
    unmapped: dict[str, float] = defaultdict(float)
    unused = 0.0
    for sku, tags, x_type, usage_type, committed, is_unused, qty, eff, lst, has_list, start, end in rows:
        itype = instance_type(sku, tags, x_type, usage_type)
        gpus = instances.get(itype or "")
        if is_unused:
            unused += float(eff or 0.0)
        elif itype is None or gpus is None or qty is None:
            unmapped[itype or "(no instance type)"] += float(eff or 0.0)
        else:
            sums.setdefault(gpus.model, _Sums(start, end)).add(
                itype, float(qty or 0.0) * gpus.gpus, float(eff or 0.0),
                float(lst or 0.0) if has_list else None, bool(committed), start, end,
            )
    models = tuple(s.billed(m) for m, s in sorted(sums.items()) if s.gpu_hours > 0)
    return FocusPrices(models, dict(unmapped), unused, total_rows)
