"""gpulens: GPU visibility, idle-capacity analytics, chargeback and quota feedback for shared Kubernetes GPUs.

The top-level folders install as one namespace: ``gpulens.core`` <
``gpulens.exporter`` < ``gpulens.collector`` < ``gpulens.analytics`` < ``gpulens.dashboards`` <
``gpulens.cli``.
"""

from gpulens.core import __version__

__all__ = ["__version__"]
