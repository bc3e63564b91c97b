"""``python -m simulator`` is the ``simulator`` console script."""

from simulator.cli import console

console()
