"""The contrastive loss over the whole batch: the all-gather of embeddings and the B x B logits.

CLIP's symmetric InfoNCE (Radford et al. 2021, Figure 3) over a global batch of B pairs, computed the way OpenCLIP's
``ClipLoss(local_loss=True, gather_with_grad=True)`` distributes it (mlfoundations/open_clip
src/open_clip/loss.py): each of the ``r`` loss ranks holds b = B / r image and text embeddings of width e;

- forward: an all-gather of the image and of the text embeddings (nccl-tests convention: each all-gather's total
  output is B x e x bytes), then the local logits image->text (b x e) @ (e x B) and text->image, 2 x 2 b B e
  FLOPs per rank, softmax and cross entropy over the b x B rows;
- backward: the gradients of the two matmuls (2 x the forward FLOPs) and a reduce-scatter of the gathered
  embeddings' gradients (B x e x bytes each, the mirror of the all-gather).

Over all ranks the logits cost 4 B^2 e FLOPs forward and 12 B^2 e in total; they are quadratic in the batch, the
reason DistMM (NSDI'24, section 2.2) calls large contrastive batches a systems problem.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContrastiveCost:
    """What one contrastive loss over ``batch`` pairs of width ``embed_dim`` costs on ``ranks`` loss ranks."""

    batch: int
    embed_dim: int
    ranks: int
    dtype_bytes: int

    @property
    def all_gather_bytes(self) -> float:
        """Total output of one embedding all-gather (one modality): B x e x bytes."""
        return float(self.batch * self.embed_dim * self.dtype_bytes)

    @property
    def gathers(self) -> int:
        """All-gathers in the forward (image and text); the backward runs as many reduce-scatters."""
        return 2

    @property
    def local_rows(self) -> float:
        """b = B / r: embeddings of each modality a loss rank holds."""
        return self.batch / self.ranks

    @property
    def logits_forward_flops_per_rank(self) -> float:
        """2 matmuls (image->text, text->image) of (b x e) @ (e x B): 4 b B e."""
        return 4.0 * self.local_rows * self.batch * self.embed_dim

    @property
    def logits_flops_total(self) -> float:
        """Forward + backward (2x) over all ranks: 12 B^2 e."""
        return 3.0 * self.logits_forward_flops_per_rank * self.ranks

    @property
    def logits_bytes_per_rank(self) -> float:
        """The two b x B logits matrices a rank keeps for the backward (fp32 softmax inputs)."""
        return 2.0 * self.local_rows * self.batch * 4


def max_contrastive_microbatch(memory_bytes: float, static_bytes: float, stages: int,
                               activation_bytes_per_sample: float) -> float:
    """The largest batch one pipeline replica can hold before its contrastive loss: (M - Ms / P) / Ma.

    A contrastive loss needs every sample's forward before any backward (a cross-sample dependency), so a pipeline
    replica keeps the activations of its whole batch in flight; with ``static_bytes`` Ms of weights, gradients and
    optimizer states split over P stages and Ma activation bytes per sample per GPU the batch is limited to
    (M - Ms / P) / Ma (DistMM, NSDI'24, section 2.2). Returns 0 when the static memory alone does not fit.
    """
    room = memory_bytes - static_bytes / stages
    return max(room, 0.0) / activation_bytes_per_sample
