"""gpulens: GPU visibility, idle-capacity analytics, chargeback and quota feedback for shared Kubernetes GPUs."""

__version__ = "0.1.0"
