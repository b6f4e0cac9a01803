"""The ground layer: errors, configuration loading and the version; it imports nothing else of gpulens."""

from gpulens.core.version import package_version

__version__ = package_version()
