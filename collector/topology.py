"""Map the exporter's GPU topology series into the store's ``gpu_topology`` rows (NULL where the hardware said nothing).

Series (``docs/metrics.md``, ``exporter/topology_exposition.py``), each info-style (value 1, or a link count):

* ``gpulens_gpu_info{gpu, index}`` -> ``gpu_index``;
* ``gpulens_gpu_numa_info{gpu, numa_node, cpu_affinity}`` -> ``numa_node``, ``cpu_affinity``;
* ``gpulens_gpu_peer_info{gpu, peer_gpu, p2p_nvlink, nvlink_domain}`` -> ``nvlink_domain`` (the GPU's domain as
  the exporter decided it: fabric clique, else its NVLink-joined group) and ``nvlink_peers`` (peers whose
  P2P-over-NVLink status is ``ok``);
* ``gpulens_gpu_fabric_info{gpu, cluster_uuid, clique_id, state}`` -> ``fabric_cluster_uuid``,
  ``fabric_clique_id`` once registration ``completed``, and the domain ``fabric:<cluster>/<clique>`` when no
  peer series named one (a GB200 node whose only peers are on other nodes).

A label the exporter left empty is NULL, never ``0`` or ``""``; a GPU with none of the series gets no row
(its levels stay unmeasured in ``placement``). Several samples of a window keep the newest per GPU.
"""

from __future__ import annotations

import polars as pl

G = "gpulens_"
TOPOLOGY_METRICS = (f"{G}gpu_numa_info", f"{G}gpu_peer_info", f"{G}gpu_fabric_info")
"""The series the collector reads for ``gpu_topology`` (``gpulens_gpu_nvlink_links`` adds nothing the store keeps)."""
_LABELS = ("node", "gpu", "numa_node", "cpu_affinity", "peer_gpu", "p2p_nvlink", "nvlink_domain",
           "cluster_uuid", "clique_id", "state")


def _blank_to_null(name: str) -> pl.Expr:
    return pl.col(name).replace("", None)


def gpu_topology_frame(df: pl.DataFrame) -> pl.DataFrame:
    """``gpu_topology`` rows from a long frame of gpulens series (``ts`` already a datetime column)."""
    index = (
        df.filter((pl.col("metric") == f"{G}gpu_info") & pl.col("gpu").is_not_null()).group_by("gpu")
        .agg(gpu_index=pl.col("index").first().cast(pl.Int32, strict=False))
        if "index" in df.columns else pl.DataFrame(schema={"gpu": pl.Utf8, "gpu_index": pl.Int32})
    )
    df = df.filter(pl.col("metric").is_in(TOPOLOGY_METRICS))
    if df.height == 0:
        return pl.DataFrame()
    df = df.with_columns(pl.lit(None, dtype=pl.Utf8).alias(c) for c in _LABELS if c not in df.columns)
    df = df.filter(pl.col("gpu").is_not_null() & (pl.col("gpu") != ""))
    seen = df.group_by("gpu").agg(node=pl.col("node").sort_by("ts").last(),
                                  first_seen=pl.col("ts").min(), last_seen=pl.col("ts").max())
    numa = (
        df.filter(pl.col("metric") == f"{G}gpu_numa_info").sort("ts").group_by("gpu").last()
        .select("gpu", _blank_to_null("numa_node").cast(pl.Int32, strict=False).alias("numa_node"),
                _blank_to_null("cpu_affinity").alias("cpu_affinity"))
    )
    peer_rows = df.filter(pl.col("metric") == f"{G}gpu_peer_info")
    newest = peer_rows.group_by("gpu").agg(pl.col("ts").max().alias("newest"))
    peers = (
        peer_rows.join(newest, on="gpu").filter(pl.col("ts") == pl.col("newest"))
        .group_by("gpu").agg(
            peer_domain=_blank_to_null("nvlink_domain").drop_nulls().first(),
            nvlink_peers=pl.col("peer_gpu").filter(pl.col("p2p_nvlink") == "ok").n_unique().cast(pl.Int32),
            peers_known=(pl.col("p2p_nvlink").replace("", None).is_not_null()).any(),
        )
        .with_columns(pl.when(pl.col("peers_known")).then(pl.col("nvlink_peers")).alias("nvlink_peers"))
        .drop("peers_known")
    )
    fabric = (
        df.filter((pl.col("metric") == f"{G}gpu_fabric_info") & (pl.col("state") == "completed"))
        .sort("ts").group_by("gpu").last()
        .select("gpu", _blank_to_null("cluster_uuid").alias("fabric_cluster_uuid"),
                _blank_to_null("clique_id").cast(pl.Int64, strict=False).alias("fabric_clique_id"))
    )
    out = seen.join(index, on="gpu", how="left").join(numa, on="gpu", how="left").join(peers, on="gpu", how="left").join(fabric, on="gpu", how="left")
    for name, dtype in (("numa_node", pl.Int32), ("cpu_affinity", pl.Utf8), ("peer_domain", pl.Utf8),
                        ("nvlink_peers", pl.Int32), ("fabric_cluster_uuid", pl.Utf8), ("fabric_clique_id", pl.Int64)):
        if name not in out.columns:
            out = out.with_columns(pl.lit(None, dtype=dtype).alias(name))
    fabric_domain = pl.when(pl.col("fabric_cluster_uuid").is_not_null() & pl.col("fabric_clique_id").is_not_null()).then(
        pl.format("fabric:{}/{}", "fabric_cluster_uuid", "fabric_clique_id"))
    return out.select(
        pl.col("gpu").alias("gpu_uuid"), "node", "gpu_index", "numa_node", "cpu_affinity",
        pl.coalesce("peer_domain", fabric_domain).alias("nvlink_domain"), "nvlink_peers",
        "fabric_cluster_uuid", "fabric_clique_id", "first_seen", "last_seen",
    ).sort("gpu_uuid")
