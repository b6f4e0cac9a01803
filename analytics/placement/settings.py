"""Settings of the placement analysis: which node labels name the rack / block / zone, and which owners are gangs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TopologySettings(BaseModel):
    """Node labels per topology level (first label present wins) and gang workload kinds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    zone_labels: tuple[str, ...] = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
    block_labels: tuple[str, ...] = (
        "cloud.google.com/gce-topology-block",
        "topology.k8s.aws/network-node-layer-2",
        "network.topology.kubernetes.io/block",
    )
    rack_labels: tuple[str, ...] = (
        "cloud.google.com/gce-topology-subblock",
        "topology.k8s.aws/network-node-layer-3",
        "network.topology.kubernetes.io/rack",
    )
    gang_kinds: tuple[str, ...] = Field(
        ("JobSet", "PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob", "TrainJob",
         "LeaderWorkerSet", "RayCluster", "RayJob", "PodGroup", "Workload"),
    )
    """Owners whose pods run as one job: their whole-GPU pods count as one multi-device workload even with
    one GPU per pod. Other owners (Deployments, StatefulSets, plain Jobs) count only when a pod holds 2+ GPUs."""

    def level_labels(self) -> dict[str, tuple[str, ...]]:
        return {"zone": self.zone_labels, "block": self.block_labels, "rack": self.rack_labels}
