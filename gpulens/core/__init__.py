"""The ground layer: errors, configuration loading and the version; it imports nothing else of gpulens."""

__version__ = "0.1.0"
