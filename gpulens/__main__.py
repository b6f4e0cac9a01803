"""``python -m gpulens``: the gpulens command line."""

from gpulens.cli import run

run()
