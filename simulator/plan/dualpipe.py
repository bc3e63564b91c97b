"""The op orders of DeepSeek's bidirectional pipeline schedules, DualPipe and DualPipeV (the schedule objects are
:mod:`simulator.plan.schedules.dualpipe` and :mod:`simulator.plan.schedules.dualpipev`), and the per-rank op
builder (:class:`RankOrder`) the zero-bubble schedules share; the replay is :mod:`simulator.schedule.dual_timeline`.

Source: deepseek-ai/DualPipe at commit 3da1bbea53606543d7f5f232338fc58096db30e3 (``dualpipe/dualpipe.py``,
``dualpipe/dualpipev.py`` ``step()``; README "Pipeline Bubbles and Memory Usage Comparison"); DeepSeek-AI 2024,
DeepSeek-V3 Technical Report (arXiv 2412.19437), Sec. 3.2.1.

Phases (global, the same on every rank):
- DualPipe (``mirrored``; pp ranks, pp stages, two copies of the model): phase 0 carries the m/2 micro-batches
  that enter at rank 0 (rank i runs stage i of copy A), phase 1 the m/2 that enter at rank pp-1 (rank i runs
  stage pp-1-i of copy B). The repository's ranks in the second half swap their local phases; here they are mapped back.
- DualPipeV (pp ranks, 2 pp stages, one copy, V-shaped): phase 0 is stage i (forward goes i -> i+1), phase 1
  stage 2pp-1-i (forward goes i -> i-1); on the last rank phase 0's output turns into phase 1's input locally.
  Every one of the m micro-batches runs both phases.
Both run eight steps per rank with P = pp/2 (DualPipe) or pp (DualPipeV), h = min(i, pp-1-i) (DualPipe) or i
(DualPipeV), n = m/2 or m chunks per phase: 2(P-h-1) F0; (h+1) x (F0 F1); (P-h-1) x (B1 W F1), B1 split;
n-2P+h+1 x (F0&B1, F1&B0) (the middle rank's first F0, B1 not overlapped); (P-h-1) x (B1, F1&B0);
(h+1) x (B1 B0) (the second half split); (P-h-1) x (W B0) (B0 split); (h+1) x W.
A split backward ("zero bubble") computes the input gradient only; its weight gradient W runs later, first in
first out. ``F&B`` is one forward and one backward of other micro-batches overlapped (each hides the other's
communication). A rank's sends are posted after the compute that follows them where the repository does so
(``posts``), and an op waits for every receive posted since the last one (``waits``), as its batched
``_commit_and_wait_comm`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.caching import memo


@dataclass(frozen=True, slots=True)
class DualOp:
    """One op of a rank: ``kind`` F, B, W or FB (an overlapped pair). F/B/W: ``phase``, ``mb``; FB: the forward's
    ``phase``, ``mb`` and the backward's ``b_phase``, ``b_mb``. ``split``: a backward without its weight gradient.
    ``waits``: inputs ``(source rank, "F"|"B", phase, micro-batch)`` the op waits for; ``posts``: outputs
    ``("F"|"B", phase, micro-batch)`` this rank sends once the op has finished."""

    kind: str
    phase: int
    mb: int
    b_phase: int = -1
    b_mb: int = -1
    split: bool = False
    waits: tuple[tuple[int, str, int, int], ...] = ()
    posts: tuple[tuple[str, int, int], ...] = ()


class RankOrder:
    """Builds one rank's order of F, B, W and F&B ops, tracking its per-phase counters: by the repository's
    step() for DualPipe (module docstring), by :mod:`simulator.plan.schedules.zb1p` and ``zbv`` for ZB-H1 and
    ZB-V. Phase 0's forward flows to higher ranks, phase 1's to lower; with two copies of the model (``mirrored``,
    DualPipe) the upper half of the ranks swaps its phases (``flip``)."""

    def __init__(self, pp: int, rank: int, mirrored: bool = False) -> None:
        self.pp, self.rank = pp, rank
        self.flip = int(mirrored and rank >= pp // 2)
        self.f = [0, 0]
        self.b = [0, 0]
        self.rf = [0, 0]
        self.rb = [0, 0]
        self.sf = [0, 0]
        self.sb = [0, 0]
        self.pending: list[tuple[int, str, int, int]] = []
        self._rows: list[list] = []             # the ops so far, as DualOp's fields with ``posts`` a list
        self.zb: list[tuple[int, int]] = []     # split backwards whose W is still to run (FIFO)

    @property
    def ops(self) -> list[DualOp]:
        """The order built so far (new frozen ops; a send posted after an op is appended to its row in place, so
        each op is built once, when the order is read)."""
        return [DualOp(k, ph, mb, bp, bmb, split, waits, tuple(posts))
                for k, ph, mb, bp, bmb, split, waits, posts in self._rows]

    def g(self, local: int) -> int:
        return local ^ self.flip

    # receives and sends: phase 0 flows to higher ranks, phase 1 to lower; none past the ends
    def recv_f(self, local: int) -> None:
        ph = self.g(local)
        src = self.rank - 1 if ph == 0 else self.rank + 1
        if 0 <= src < self.pp:
            self.pending.append((src, "F", ph, self.rf[ph]))
            self.rf[ph] += 1

    def recv_b(self, local: int) -> None:
        ph = self.g(local)
        src = self.rank + 1 if ph == 0 else self.rank - 1
        if 0 <= src < self.pp:
            self.pending.append((src, "B", ph, self.rb[ph]))
            self.rb[ph] += 1

    def send_f(self, local: int) -> None:
        ph = self.g(local)
        if 0 <= (self.rank + 1 if ph == 0 else self.rank - 1) < self.pp:
            self._post(("F", ph, self.sf[ph]))
            self.sf[ph] += 1

    def send_b(self, local: int) -> None:
        ph = self.g(local)
        if 0 <= (self.rank - 1 if ph == 0 else self.rank + 1) < self.pp:
            self._post(("B", ph, self.sb[ph]))
            self.sb[ph] += 1

    def _post(self, key: tuple[str, int, int]) -> None:
        self._rows[-1][7].append(key)

    def _op(self, kind: str, phase: int, mb: int, b_phase: int = -1, b_mb: int = -1, split: bool = False) -> None:
        self._rows.append([kind, phase, mb, b_phase, b_mb, split, tuple(self.pending), []])
        self.pending = []

    # compute chunks
    def forward(self, local: int, recv: bool = True, send: bool = True) -> None:
        if recv:
            self.recv_f(local)
        ph = self.g(local)
        self._op("F", ph, self.f[ph])
        self.f[ph] += 1
        if send:
            self.send_f(local)

    def backward(self, local: int, split: bool = False, recv: bool = True, send: bool = True) -> None:
        if recv:
            self.recv_b(local)
        ph = self.g(local)
        self._op("B", ph, self.b[ph], split=split)
        if split:
            self.zb.append((ph, self.b[ph]))
        self.b[ph] += 1
        if send:
            self.send_b(local)

    def pair(self, f_local: int, b_local: int, recv_f: bool = True) -> None:
        if recv_f:
            self.recv_f(f_local)
        self.recv_b(b_local)
        fp, bp = self.g(f_local), self.g(b_local)
        self._op("FB", fp, self.f[fp], b_phase=bp, b_mb=self.b[bp])
        self.f[fp] += 1
        self.b[bp] += 1
        self.send_f(f_local)
        self.send_b(b_local)

    def weight(self) -> None:
        ph, mb = self.zb.pop(0)
        self._op("W", ph, mb)


def dual_rank(mirrored: bool, pp: int, m: int, rank: int) -> RankOrder:
    """The eight steps of the module docstring for one rank (``mirrored``: DualPipe, else DualPipeV)."""
    r = RankOrder(pp, rank, mirrored)
    if mirrored:
        big_p, h, n = pp // 2, min(rank, pp - 1 - rank), m // 2
    else:
        big_p, h, n = pp, rank, m
    _warm_up(r, big_p, h)
    _steady(r, big_p, h, n)
    _cool_down(r, big_p, h)
    if r.zb or r.pending:
        raise RuntimeError("dual schedule left work behind (internal error)")
    return r


def _warm_up(r: RankOrder, big_p: int, h: int) -> None:
    """Steps 1-3: forwards of phase 0, then of both phases, then split backwards of phase 1 with their W."""
    middle = h == big_p - 1
    for _ in range(2 * (big_p - h - 1)):                       # 1: F0
        r.forward(0)
    r.recv_f(0)                                                # 2: F0 F1 (F0's send posted after F1)
    for i in range(h + 1):
        r.forward(0, recv=False, send=middle)
        r.recv_f(0)
        r.forward(1, send=(not middle) or i < h)
        if not middle:
            r.send_f(0)
    for _ in range(big_p - h - 1):                             # 3: B1 (split) W F1
        r.backward(1, split=True)
        r.recv_f(1)
        r.weight()
        r.forward(1, recv=False)


def _steady(r: RankOrder, big_p: int, h: int, n: int) -> None:
    """Steps 4-5: overlapped forward & backward pairs."""
    for i in range(n - 2 * big_p + h + 1):                     # 4: F0&B1 F1&B0
        if i == 0 and h == big_p - 1:                          # the middle rank: not overlapped, a shorter bubble
            r.forward(0, recv=False, send=False)
            r.send_f(1)
            r.backward(1, send=False)
            r.send_f(0)
            r.send_b(1)
        else:
            r.pair(0, 1, recv_f=i > 0)
        r.pair(1, 0)
    for _ in range(big_p - h - 1):                             # 5: B1 F1&B0
        r.backward(1)
        r.pair(1, 0)


def _cool_down(r: RankOrder, big_p: int, h: int) -> None:
    """Steps 6-8: the last backwards (the second half split) and the deferred weight gradients."""
    split = False                                              # 6: B1 B0
    for i in range(h + 1):
        if i == (h + 1) // 2 and h % 2 == 1:
            split = True
        r.backward(1, split=split)
        if i == (h + 1) // 2 and h % 2 == 0:
            split = True
        r.backward(0, split=split)
    for _ in range(big_p - h - 1):                             # 7: W B0 (split)
        r.weight()
        r.backward(0, split=True)
    for _ in range(h + 1):                                     # 8: W
        r.weight()


@memo(maxsize=256)
def dual_orders(mirrored: bool, pp: int, microbatches: int) -> tuple[tuple[DualOp, ...], ...]:
    """The op order of every rank of DualPipe (``mirrored``) or DualPipeV (plan rules hold: pp >= 2, m >= 2 pp;
    even pp and m for DualPipe). Cached: callers must not modify them."""
    return tuple(tuple(dual_rank(mirrored, pp, microbatches, i).ops) for i in range(pp))
