"""Plan search: every valid plan of a model on a cluster, pruned by memory, ranked by step time (docs/search.md).

Imports scenario and what it builds on; ``simulator search`` (cli) and notebooks call :func:`search`.
"""

from simulator.search.run import MAX_SEARCH_PLANS, SearchResult, search

__all__ = ["MAX_SEARCH_PLANS", "SearchResult", "search"]
