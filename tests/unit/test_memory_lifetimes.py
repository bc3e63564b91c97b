"""Plain-PyTorch / Hugging Face memory lifetimes (issue 28 item 3): gradients created layer by layer in backward
(``training.gradient_lifetime: per_layer``) and what Hugging Face's loss keeps on the logits
(``training.loss_implementation: hf_fp32``), checked by hand on a 4-layer GPT."""

from pathlib import Path

import pytest

from simulator.cli import main
from simulator.errors import UserError
from simulator.memory import estimate_memory
from simulator.model import ModelSpec
from simulator.plan import resolve_plan

GPT = ModelSpec(layers=4, hidden=1024, heads=16, vocab=50304)
T, H, V, L = 2 * 1024, 1024, 50304, 4
LAYER = 12 * H * H + 4 * H                # attention 4h^2, GeLU MLP 8h^2, two LayerNorms' weight and bias 4h
OUTSIDE = 2 * V * H + 2 * H               # untied embedding and output layer, final LayerNorm
N = L * LAYER + OUTSIDE                   # 153,372,672 parameters
W, G, MOM = 2 * N, 2 * N, 4 * N            # pure bf16: weights, gradients, two Adam moments (2 B each)
KEPT = W + MOM
X_HF = 12 * T * V                         # Hugging Face's loss at backward: three fp32 token x vocab buffers
LAYER_ACTS = 32 * T * H + 4 * T * 16 + 16 * T   # a full layer's saved tensors (tests/unit/test_memory_estimate.py)
HEAD_ACTS = 2 * 2 * T * H                 # final norm input and output-layer input, 2 B each


def _stage(recompute="none", **training):
    t = {"seq_len": 1024, "micro_batch": 2, "global_batch": 2, "framework": "pytorch", "precision": "pure_bf16"}
    rp = resolve_plan(GPT, {"recompute": recompute}, t | training, 1)
    return estimate_memory(rp).stages[0]


def test_the_counts_behind_the_hand_numbers():
    assert N == 153_372_672 and LAYER == 12_587_008
    st = _stage("full", loss_implementation="hf_fp32")
    assert st.bucket("gradients") == G and st.bucket("weights") == W and st.bucket("optimizer") == MOM
    assert st.bucket("activations") == L * 2 * T * H + HEAD_ACTS


def test_hf_loss_keeps_three_fp32_token_by_vocab_buffers():
    """ForCausalLMLoss: logits.float() then F.cross_entropy. Forward at the loss: bf16 logits 2TV + fp32 copy 4TV
    + log-softmax output 4TV = 10TV; backward at the loss: the saved log-softmax output 4TV, nll_loss's gradient 4TV
    and log_softmax_backward's fp32 logits gradient 4TV = 12TV = 12 x 2048 x 50304 = 1,236,271,104 B (the 16-bit
    logits died with the model output). The plain-PyTorch loop that keeps its 16-bit logits holds 14TV (those 2TV
    on top; their 16-bit gradient comes once the log-softmax output and its gradient died)."""
    loss = {i.name: i.bytes for i in _stage(loss_implementation="hf_fp32").items
            if i.name.startswith(("logits.", "loss."))}
    assert loss == {"logits.fp32": 4 * T * V, "loss.grad_fp32": 8 * T * V}
    assert sum(loss.values()) == X_HF == 1_236_271_104
    plain = sum(i.bytes for i in _stage().items if i.name.startswith(("logits.", "loss.")))
    assert plain == 14 * T * V


def test_per_layer_gradients_with_checkpointing_by_hand():
    """Full recompute (HF gradient_checkpointing): activations = 4 layer inputs 2TH each + head 4TH = 25,165,824.
    loss:        W + O + A + 12TV                           = 306,745,344 + 613,490,688 + 25,165,824
                                                              + 1,236,271,104 = 2,181,672,960
    last layer:  W + O + 4 x 2TH + G_out + G_L/4 + R        = 920,236,032 + 16,777,216 + 206,049,280
                                                              + 25,174,016 + 67,272,704 = 1,235,509,248
    first layer: W + O + 2TH + G_out + G_L + R              = 920,236,032 + 4,194,304 + 206,049,280
                                                              + 100,696,064 + 67,272,704 = 1,298,448,384
    end:         W + O + G                                  = 1,226,981,376
    with G_out = 2 x 103,024,640 (embedding, output layer, final norm), G_L = 2 x 4 x 12,587,008 and R = one layer
    rebuilt, 67,272,704. The peak is at the loss: 2,181,672,960 B. The endpoint rule (all transients on top of
    all gradients) gives 2,530,525,184 (+16%)."""
    st = _stage("full", loss_implementation="hf_fp32", gradient_lifetime="per_layer")
    g_out, g_l = 2 * OUTSIDE, 2 * L * LAYER
    assert g_out == 206_049_280 and LAYER_ACTS == 67_272_704
    assert dict(st.phases) == {
        "loss": KEPT + L * 2 * T * H + HEAD_ACTS + X_HF,
        "backward of the last layer": KEPT + L * 2 * T * H + g_out + g_l / L + LAYER_ACTS,
        "backward of the first layer": KEPT + 2 * T * H + g_out + g_l + LAYER_ACTS,
        "end of backward": KEPT + G}
    assert st.peak == 2_181_672_960
    assert _stage("full", loss_implementation="hf_fp32").peak == 2_530_525_184


def test_per_layer_gradients_without_checkpointing_by_hand():
    """No recompute: A = 4 x 67,272,704 + 4TH = 277,479,424; the loss phase W + O + A + 12TV = 2,433,986,560 is
    the peak; the layer phases hold 920,236,032 + 269,090,816 + 206,049,280 + 25,174,016 = 1,420,550,144 (last
    layer) and 920,236,032 + 67,272,704 + 206,049,280 + 100,696,064 = 1,294,254,080 (first layer)."""
    st = _stage(loss_implementation="hf_fp32", gradient_lifetime="per_layer")
    phases = dict(st.phases)
    assert phases["loss"] == KEPT + L * LAYER_ACTS + HEAD_ACTS + X_HF == 2_433_986_560
    assert phases["backward of the last layer"] == 1_420_550_144
    assert phases["backward of the first layer"] == 1_294_254_080
    assert st.peak == 2_433_986_560


def test_defaults_keep_the_endpoint_rule():
    st = _stage("full")
    assert st.phases == () and st.gradients_freed
    assert st.peak == st.total + sum(i.bytes for i in st.items if i.bucket == "transient") \
        - min(st.bucket("activations"), st.bucket("gradients"))


def test_gradient_accumulation_keeps_the_sum():
    """With two micro-batches the first one's gradients live through the second's forward: no phases."""
    st = _stage(gradient_lifetime="per_layer", global_batch=4)
    assert st.phases == () and not st.gradients_freed


@pytest.mark.parametrize("training, key", [
    ({"gradient_lifetime": "per_layer"}, "training.gradient_lifetime"),
    ({"gradient_lifetime": "per_layer", "framework": "pytorch", "grad_set_to_none": False},
     "training.gradient_lifetime"),
    ({"loss_implementation": "hf_fp32"}, "training.loss_implementation"),
])
def test_combinations_outside_plain_pytorch_are_refused(training, key):
    with pytest.raises(UserError, match=key.split(".")[1]):
        resolve_plan(GPT, {}, {"global_batch": 8} | training, 8)


SCENARIO = """name: hf-loss-on-megatron
system:
  profile: dgx_h100
  nodes: 1
model:
  name: gpt
  layers: 4
  hidden: 1024
  heads: 16
  vocab: 50304
training:
  global_batch: 8
  framework: megatron
  loss_implementation: hf_fp32
"""


def test_cli_names_file_line_and_key(tmp_path: Path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(SCENARIO)
    code = main(["run", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    line = SCENARIO.splitlines().index("  loss_implementation: hf_fp32") + 1
    assert f"{path}:{line}: training.loss_implementation" in err and "framework pytorch" in err
