"""When tensors live in a plain-PyTorch step whose gradients are created in backward: the phases of backward
that can hold the stage's peak (``training.gradient_lifetime: per_layer``).

With ``optimizer.zero_grad(set_to_none=True)`` no gradient exists when backward starts; autograd's AccumulateGrad
node of a parameter creates its ``.grad`` when the backward of the module that uses it runs (PyTorch
torch/csrc/autograd/functions/accumulate_grad.h: the incoming gradient is stolen or copied into a new ``.grad``
when none exists), and a layer's saved tensors are freed when its backward node has run. With one micro-batch the
live bytes of a stage are, with S the items alive throughout (weights, master copy, moments, buffers, transients
other than the loss's and the recomputed layer), A the activations (A_head: the final norm's and the output
layer's inputs; A_L = A - A_head the L layers' share), G the gradients (G_out: embedding, final norm, output
layer, created at the head's backward, conservatively also for an untied embedding; G_L = G - G_out), X the loss
buffers (``logits.*``, ``loss.*``) and R the layer rebuilt by recomputation:

    at the loss (end of forward, start of backward)  S + A + X
    backward of layer k (k = 0 the last layer, k layers done, its own activations and gradients alive)
                                                      S + A_L (L - k) / L + G_out + G_L (k + 1) / L + R
    end of backward                                   S + G

The layer phase is linear in k, so its largest value is at k = 0 or k = L - 1. Layers are taken as equal (their
activations and gradients spread evenly over the stage's layers).
"""

from __future__ import annotations

from simulator.memory.items import MemoryItem

#: activation items of the stage's last-stage head, freed by the head's backward before the layers' backward
HEAD_ACTIVATIONS = ("final_norm.input", "output_layer.input")
#: the transient of one layer re-run in backward by activation recomputation
RECOMPUTED_LAYER = "recompute.layer"


def _is_loss(item: MemoryItem) -> bool:
    return item.name.startswith(("logits.", "loss."))


def backward_phases(items: tuple[MemoryItem, ...] | list[MemoryItem], layers: int, outside_grad_bytes: float
                    ) -> tuple[tuple[str, float], ...]:
    """(phase, live bytes) of the phases of backward that can hold the peak (module docstring).

    Args:
        items: the stage's memory items (:func:`simulator.memory.estimate.estimate_memory`).
        layers: L, the transformer layers on the stage.
        outside_grad_bytes: G_out, the gradient bytes of the parameters outside the layers (embedding, final norm,
            output layer).
    """
    grads = sum(i.bytes for i in items if i.bucket == "gradients")
    acts = sum(i.bytes for i in items if i.bucket == "activations")
    head = sum(i.bytes for i in items if i.bucket == "activations" and i.name in HEAD_ACTIVATIONS)
    loss = sum(i.bytes for i in items if _is_loss(i))
    rebuilt = sum(i.bytes for i in items if i.name == RECOMPUTED_LAYER)
    kept = sum(i.bytes for i in items if i.bucket not in ("gradients", "activations") and not _is_loss(i)
               and i.name != RECOMPUTED_LAYER)
    g_out = min(outside_grad_bytes, grads)
    phases = [("loss", kept + acts + loss)]
    if layers:
        a_l, g_l = acts - head, grads - g_out
        phases.append(("backward of the last layer", kept + a_l + g_out + g_l / layers + rebuilt))
        phases.append(("backward of the first layer", kept + a_l / layers + g_out + g_l + rebuilt))
    phases.append(("end of backward", kept + grads))
    return tuple(phases)
