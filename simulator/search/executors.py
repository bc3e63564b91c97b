"""Where candidates are evaluated: this process (``local``) or shards on a Ray cluster (``ray``), keyed by name.

Both evaluate with :func:`simulator.search.evaluate.evaluate_points` and return the same rows; ranking happens
after (:func:`simulator.search.rank.rank`, with a deterministic tie-break), so the ranking does not depend on the
executor. Ray is an optional extra (``pip install -e '.[ray]'``), imported only when asked for.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from simulator.caching import memo
from simulator.errors import UserError
from simulator.scenario.document import Document
from simulator.search.bound import Bound
from simulator.search.evaluate import Context, Evaluated, evaluate_points

#: candidates per shard (a local progress step; a Ray task)
SHARD = 2048


def _shards(points: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [points[i:i + size] for i in range(0, len(points), size)]


def run_local(document: Document, ctx: Context, points: list[dict[str, Any]], *, ray_address: str | None = None,
              progress: Callable[[int], None] | None = None, bound: Bound | None = None,
              lower_only: bool = False) -> Evaluated:
    """Evaluate in this process, shard by shard (``bound``, ``lower_only``:
    :func:`simulator.search.evaluate.evaluate_points`)."""
    del document, ray_address
    out = Evaluated()
    for shard in _shards(points, SHARD):
        out.merge(evaluate_points(ctx, shard, bound, lower_only))
        if progress:
            progress(len(shard))
    return out


@memo(maxsize=4, loaded=True)    # a few: one search at a time, a co-design study one after another
def _worker_context(document_json: str) -> Context:
    """A Ray worker's search context of one scenario (its JSON text, :func:`_ray_shard`), built once per worker."""
    import json

    from simulator.search.run import search_context

    file, data, origins = json.loads(document_json)
    return search_context(Document(file=file, data=data, origins={k: tuple(v) for k, v in origins.items()}))


def _ray_shard(document: Document, shard: list[dict[str, Any]], bound: Bound | None = None,
               lower_only: bool = False) -> Evaluated:
    """One Ray task: the context of the scenario, built once per worker process and scenario (so that its layer
    times, op times and validated configs serve every shard the worker runs), and evaluate."""
    import json

    return evaluate_points(_worker_context(json.dumps([document.file, document.data, document.origins], sort_keys=True,
                                                      default=str)),
                           shard, bound, lower_only)


def run_ray(document: Document, ctx: Context, points: list[dict[str, Any]], *, ray_address: str | None = None,
            progress: Callable[[int], None] | None = None, bound: Bound | None = None,
            lower_only: bool = False) -> Evaluated:
    """Shard the candidates over a Ray cluster (``ray_address``, else ``RAY_ADDRESS``, else a local cluster);
    results stream back as shards finish. The shards are spread over the cluster's nodes (Ray's ``SPREAD``
    scheduling strategy) rather than packed onto the driver's node first, Ray's default, so a study uses every node
    from its first shards on."""
    del ctx
    try:
        import ray
    except ImportError:
        raise UserError("--executor ray needs Ray: pip install -e '.[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=ray_address or os.environ.get("RAY_ADDRESS"), ignore_reinit_error=True,
                 log_to_driver=False)
    task = ray.remote(scheduling_strategy="SPREAD")(_ray_shard)
    ref = ray.put(document)
    pending = {task.remote(ref, shard, bound, lower_only): len(shard) for shard in _shards(points, SHARD)}
    out = Evaluated()
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for r in done:
            out.merge(ray.get(r))
            size = pending.pop(r)
            if progress:
                progress(size)
    return out


EXECUTORS = {"local": run_local, "ray": run_ray}


def run_executor(name: str, document: Document, ctx: Context, points: list[dict[str, Any]], **kwargs) -> Evaluated:
    if name not in EXECUTORS:
        raise UserError(f"unknown executor {name!r}; accepted: {', '.join(EXECUTORS)}")
    return EXECUTORS[name](document, ctx, points, **kwargs)
