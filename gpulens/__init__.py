"""gpulens: GPU visibility, idle-capacity analytics, chargeback and quota feedback for shared Kubernetes GPUs.

This package holds the command line (``gpulens.cli``) and the ground floor every layer shares
(``gpulens.core``, ``gpulens.sim``); the card's folders are top-level packages next to it:
``gpulens.core`` < ``gpulens.sim`` < ``exporter`` < ``collector`` < ``analytics`` < ``dashboards`` <
``gpulens.cli``.
"""

from gpulens.core import __version__

__all__ = ["__version__"]
