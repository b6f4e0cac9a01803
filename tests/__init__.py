"""gpulens test suite (a package so that ``tests.support`` helpers import the same way everywhere)."""
