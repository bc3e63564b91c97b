"""``python -m simulator`` is the ``simulator`` console script."""

from simulator.cli import main

raise SystemExit(main())
