"""``python -m gpulens.cli``: the gpulens command line."""

from gpulens.cli import run

run()
