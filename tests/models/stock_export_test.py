#!/usr/bin/python3
"""Stock `torch.onnx.export` training exports, written here without models/ and its annotations.

Two tiny language models with Hugging Face's spellings of the ops that canonicalize fuses:
- GPT-2 style: LayerNorm, `gelu_new` written out as HF's NewGELUActivation, `nn.Dropout(0.0)`
  at every place GPT-2 has one (torch exports them as `Dropout(x, 0.0, training=True)` with a mask);
- Llama style: HF LlamaRMSNorm (the float32 Cast pair around it), `F.gelu(approximate="tanh")`,
  SiLU-gated MLP, a rotary-free attention;
- MPT style with the causal+ALiBi mask as a float buffer holding -inf (`transformer.attn_bias`), as
  older MPT code keeps it: without foundry.parameters it must stay a constant and train with no flag;
- Phi's pattern, one module object called twice per block (torch names the second call's scope
  `act_1`): one module in the tree, and `--ckpt act` recomputes both calls, gradients bitwise plain;
- Hugging Face OPT's learned positions: `cumsum` over an all-ones mask (CumSum, folded once the
  shapes are bound).
Each is exported in training mode with torch's defaults otherwise (no foundry metadata), compiled
with foundry-compile, and checked:
- canonicalize's counts: every tanh GELU, RMSNorm and ratio-0 Dropout found, and the training
  graph holds no Dropout, Tanh or Pow;
- the one-line warning about a stock export (no foundry.parameters) names the count;
- one training step's gradients (foundry-run --dump-grads) equal PyTorch autograd's within 1e-5
  relative (max|a-b| / max(max|b|, 1e-3 * largest gradient of the model)).

Run from anywhere: /usr/bin/python3 tests/models/stock_export_test.py (FOUNDRY_BIN_DIR names the
build folder, default build/). Exits 77 (skip) without torch/onnx/numpy, except under FOUNDRY_CI=1.
"""

import math
import os
import re
import subprocess
import sys
import tempfile
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import numpy as np
    import onnx
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from onnx import numpy_helper
except ImportError as e:
    if os.environ.get("FOUNDRY_CI") == "1":
        print(f"FAIL: {e}; CI (FOUNDRY_CI=1) needs torch, onnx and numpy: run scripts/setup.sh")
        sys.exit(1)
    print(f"SKIP: {e} (install python3-torch and python3-onnx with scripts/setup.sh)")
    sys.exit(77)

BIN = os.environ.get("FOUNDRY_BIN_DIR", os.path.join(REPO, "build"))
VOCAB, D, SEQ, BATCH = 64, 32, 8, 2
GRAD_TOL = 1e-5


class CheckFailed(Exception):
    pass


def check(cond, message):
    if not cond:
        raise CheckFailed(message)


# --------------------------------------------------------------------------------------------
# The models, in Hugging Face's spelling.


class NewGELUActivation(nn.Module):  # transformers.activations.NewGELUActivation
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                           (x + 0.044715 * torch.pow(x, 3.0))))


class LlamaRMSNorm(nn.Module):  # transformers.models.llama.modeling_llama.LlamaRMSNorm
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Attention(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.q_proj, self.k_proj = nn.Linear(D, D), nn.Linear(D, D)
        self.v_proj, self.o_proj = nn.Linear(D, D), nn.Linear(D, D)
        self.attn_dropout, self.resid_dropout = nn.Dropout(dropout), nn.Dropout(dropout)
        self.register_buffer("causal", torch.tril(torch.ones(SEQ, SEQ, dtype=torch.bool)),
                             persistent=False)

    def forward(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        s = q @ k.transpose(-1, -2) / math.sqrt(D)
        s = s.masked_fill(~self.causal, torch.finfo(s.dtype).min)
        p = self.attn_dropout(torch.softmax(s, dim=-1))
        return self.resid_dropout(self.o_proj(p @ v))


class GPT2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = Attention(0.0)
        self.c_fc, self.c_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.act, self.dropout = NewGELUActivation(), nn.Dropout(0.0)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.dropout(self.c_proj(self.act(self.c_fc(self.ln_2(x)))))


class GPT2(nn.Module):
    LAYERS = 2

    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(SEQ, D)
        self.drop = nn.Dropout(0.0)
        self.h = nn.ModuleList(GPT2Block() for _ in range(self.LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, input_ids):
        x = self.drop(self.wte(input_ids) + self.wpe(torch.arange(SEQ)))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    # Found by canonicalize: (tanh gelu, rmsnorm, inactive dropout).
    EXPECTED = (LAYERS, 0, 1 + 3 * LAYERS)


class LlamaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = LlamaRMSNorm(D), LlamaRMSNorm(D)
        self.self_attn = Attention(0.0)
        self.gate_proj, self.up_proj = nn.Linear(D, 2 * D, bias=False), nn.Linear(D, 2 * D, bias=False)
        self.down_proj = nn.Linear(2 * D, D, bias=False)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * F.gelu(self.up_proj(h),
                                                                      approximate="tanh"))


class Llama(nn.Module):
    LAYERS = 2

    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(LlamaBlock() for _ in range(self.LAYERS))
        self.norm = LlamaRMSNorm(D)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))

    EXPECTED = (LAYERS, 2 * LAYERS + 1, 2 * LAYERS)


class MaskAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.Wqkv, self.out_proj = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)

    def forward(self, x, attn_bias):
        q, k, v = self.Wqkv(x).chunk(3, dim=-1)
        s = q @ k.transpose(-1, -2) / math.sqrt(D) + attn_bias
        return self.out_proj(torch.softmax(s, dim=-1) @ v)


class MaskMPTBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm_1, self.norm_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = MaskAttention()
        self.up_proj, self.down_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x, attn_bias):
        x = x + self.attn(self.norm_1(x), attn_bias)
        return x + self.down_proj(F.gelu(self.up_proj(self.norm_2(x)), approximate="tanh"))


class MaskTransformer(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(MaskMPTBlock() for _ in range(layers))
        self.norm_f = nn.LayerNorm(D)
        # A float buffer holding -inf: the causal mask with an ALiBi slope, built once, as older
        # MPT code keeps it (`transformer.attn_bias`). Not a parameter: foundry must not train it.
        pos = torch.arange(SEQ, dtype=torch.float32)
        bias = -0.5 * (pos[None, :] - pos[:, None]).abs()
        bias = bias.masked_fill(torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1), float("-inf"))
        self.register_buffer("attn_bias", bias)


class MaskMPT(nn.Module):
    """TorchScript export with a -inf mask buffer and no foundry.parameters: trains with no flag."""
    LAYERS = 2

    def __init__(self):
        super().__init__()
        self.transformer = MaskTransformer(self.LAYERS)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, input_ids):
        t = self.transformer
        x = t.wte(input_ids)
        for block in t.blocks:
            x = block(x, t.attn_bias)
        return self.lm_head(t.norm_f(x))

    EXPECTED = (LAYERS, 0, 0)
    FROZEN = ["transformer.attn_bias"]


class TwiceBlock(nn.Module):
    """Phi's pattern: one module object called at two places of the forward."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.fc1, self.fc2 = nn.Linear(D, D), nn.Linear(D, D)
        self.act = NewGELUActivation()
        self.resid_dropout = nn.Dropout(0.0)

    def forward(self, x):
        h = self.ln(x)
        a = self.resid_dropout(self.act(self.fc1(h)))
        return x + a + self.resid_dropout(self.act(self.fc2(h)))


class TwiceCalled(nn.Module):
    """A module called twice is one module: no `act_1` in the tree, and --ckpt act recomputes
    both calls with the plain gradients' bits."""
    LAYERS = 2

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.h = nn.ModuleList(TwiceBlock() for _ in range(self.LAYERS))
        self.lm_head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, input_ids):
        x = self.wte(input_ids)
        for block in self.h:
            x = block(x)
        return self.lm_head(x)

    EXPECTED = (2 * LAYERS, 0, 2 * LAYERS)
    TWICE = "act"


class OPTLearnedPositionalEmbedding(nn.Embedding):
    """Hugging Face OPT's positions: a cumsum over the attention mask (all ones here), offset 2."""

    def forward(self, attention_mask):
        positions = (torch.cumsum(attention_mask, dim=1) * attention_mask).long() - 1
        return super().forward(positions + 2)


class OPTBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn_layer_norm, self.final_layer_norm = nn.LayerNorm(D), nn.LayerNorm(D)
        self.self_attn = Attention(0.0)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(torch.relu(self.fc1(self.final_layer_norm(x))))


class OPT(nn.Module):
    """CumSum over a mask built from the input's shape: folded once the shapes are bound."""
    LAYERS = 2

    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, D)
        self.embed_positions = OPTLearnedPositionalEmbedding(SEQ + 2, D)
        self.layers = nn.ModuleList(OPTBlock() for _ in range(self.LAYERS))
        self.lm_head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, input_ids):
        mask = torch.ones_like(input_ids)
        x = self.embed_tokens(input_ids) + self.embed_positions(mask)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(x)

    EXPECTED = (0, 0, 2 * LAYERS)


# --------------------------------------------------------------------------------------------
# Export, compile, one step, compare.


def save_tensor(path, array):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array).SerializeToString())


def load_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    check(proc.returncode == 0,
          f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc


def check_model(cls, tmp):
    torch.manual_seed(0)
    model = cls()
    input_ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    labels = torch.randint(0, VOCAB, (BATCH, SEQ))
    labels[0, :3] = -100  # ignored tokens, as padding in a real batch

    path = os.path.join(tmp, cls.__name__ + ".onnx")
    model.train()
    torch.onnx.export(model, (input_ids,), path, opset_version=17, input_names=["input_ids"],
                      output_names=["logits"], training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    exported = onnx.load(path)
    dropouts = sum(n.op_type == "Dropout" for n in exported.graph.node)
    check(dropouts == cls.EXPECTED[2], f"{cls.__name__}: the export has {dropouts} Dropout nodes, "
          f"the test expects {cls.EXPECTED[2]}: torch's export changed")

    prefix = os.path.join(tmp, cls.__name__)
    proc = run([os.path.join(BIN, "foundry-compile"), path, "-o", prefix])
    stats = re.search(r"canonicalize: ([^;\n]*)", proc.stdout)
    check(stats, f"no canonicalize line in:\n{proc.stdout}")
    counts = {k: int(v) for k, v in (item.rsplit(" ", 1) for item in stats.group(1).split(", "))}
    got = (counts.get("tanh gelu"), counts.get("rmsnorm"), counts.get("inactive dropout"))
    check(got == cls.EXPECTED, f"{cls.__name__}: canonicalize found (tanh gelu, rmsnorm, inactive "
          f"dropout) = {got}, expected {cls.EXPECTED}:\n{stats.group(0)}")
    # Every attention (one Softmax each; TwiceCalled has none) is fused into foundry::Attention,
    # single-head ([batch, seq, dim]) as these are.
    softmaxes = sum(n.op_type == "Softmax" for n in exported.graph.node)
    check(counts.get("attention fused") == softmaxes and
          counts.get("attention unfused") == 0,
          f"{cls.__name__}: {softmaxes} attention softmaxes, canonicalize: {stats.group(0)}")
    warnings = [line for line in proc.stderr.splitlines() if line.strip()]
    n_params = len(list(model.parameters()))
    check(len(warnings) == 1 and warnings[0].startswith("foundry-compile: warning: ") and
          str(n_params) in warnings[0],
          f"{cls.__name__}: expected one warning line naming {n_params} trained initializers, "
          f"got {warnings}")
    for buffer in getattr(cls, "FROZEN", []):
        check(f"'{buffer}'" in warnings[0],
              f"{cls.__name__}: the warning does not name the non-finite buffer {buffer}: "
              f"{warnings[0]}")
    train = onnx.load(prefix + ".train.onnx")
    left = sorted({n.op_type for n in train.graph.node} & {"Dropout", "Tanh", "Pow"})
    check(not left, f"{cls.__name__}: the training graph still has {left}")

    save_tensor(os.path.join(tmp, "input_ids.pb"), input_ids.numpy().astype(np.int64))
    save_tensor(os.path.join(tmp, "labels.pb"), labels.numpy().astype(np.int64))
    grads_dir = os.path.join(tmp, cls.__name__ + "_grads")
    run([os.path.join(BIN, "foundry-run"), prefix, "--device", "cpu", "--steps", "1",
         "--optimizer", "sgd", "--feed", "input_ids=" + os.path.join(tmp, "input_ids.pb"),
         "--feed", "labels=" + os.path.join(tmp, "labels.pb"), "--dump-grads", grads_dir])

    twice = getattr(cls, "TWICE", None)
    if twice:
        listing = run([os.path.join(BIN, "foundry-compile"), path, "--list-modules"]).stdout
        check(f"h.0.{twice} " in listing and f"h.0.{twice}_1" not in listing,
              f"{cls.__name__}: the module called twice is not one module:\n{listing}")
        ckpt_prefix = prefix + "_ckpt"
        out = run([os.path.join(BIN, "foundry-compile"), path, "--ckpt", twice, "-o",
                   ckpt_prefix]).stdout
        check(f"remat: {cls.LAYERS} instances checkpointed" in out,
              f"{cls.__name__}: --ckpt {twice} did not checkpoint one instance per block:\n{out}")
        ckpt_grads = grads_dir + "_ckpt"
        run([os.path.join(BIN, "foundry-run"), ckpt_prefix, "--device", "cpu", "--steps", "1",
             "--optimizer", "sgd", "--feed", "input_ids=" + os.path.join(tmp, "input_ids.pb"),
             "--feed", "labels=" + os.path.join(tmp, "labels.pb"), "--dump-grads", ckpt_grads])
        for f in sorted(os.listdir(grads_dir)):
            with open(os.path.join(grads_dir, f), "rb") as a, \
                    open(os.path.join(ckpt_grads, f), "rb") as b:
                check(a.read() == b.read(), f"{cls.__name__}: --ckpt {twice} changes {f}")

    model.zero_grad()
    logits = model(input_ids)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)
    loss.backward()
    want = {name: p.grad.numpy().astype(np.float64) for name, p in model.named_parameters()}
    floor = 1e-3 * max(float(np.max(np.abs(g))) for g in want.values())
    got_files = sorted(f for f in os.listdir(grads_dir) if f.endswith("_grad.pb"))
    # A tied or renamed parameter would change the names; this model has none.
    check(sorted(n + "_grad.pb" for n in want) == got_files,
          f"{cls.__name__}: gradients {got_files} != parameters {sorted(want)}")
    worst = 0.0
    for name, w in want.items():
        g = load_tensor(os.path.join(grads_dir, name + "_grad.pb")).astype(np.float64)
        check(g.shape == w.shape, f"{name}: shape {g.shape} != {w.shape}")
        check(np.all(np.isfinite(g)), f"{name}: foundry's gradient is not finite")
        err = float(np.max(np.abs(g - w))) / max(float(np.max(np.abs(w))), floor)
        check(err <= GRAD_TOL, f"{cls.__name__}: {name}_grad differs from PyTorch's by {err:.3g} "
              f"relative (bound {GRAD_TOL:g})")
        worst = max(worst, err)
    return f"{len(want)} gradients, worst relative error {worst:.2g}"


def check_functions_mpt(tmp):
    """torch 1.13's export_modules_as_functions of an MPT from models/mpt.py (GQA, ALiBi,
    LPLayerNorm without bias) with the function set {MPTBlock, the attention classes, MPTMLP,
    LPLayerNorm}: positional function inputs, constants hoisted out of the first block's call,
    scoped call-node names. The tree lists each block and attention with its class, and
    --ckpt grouped_query_attention checkpoints every layer with the plain gradients' bits."""
    sys.path.insert(0, REPO)
    from models import families, mpt
    layers = 2
    cfg = {"family": "mpt", "d_model": D, "n_heads": 4, "n_layers": layers, "expansion_ratio": 4,
           "max_seq_len": SEQ, "vocab_size": VOCAB, "no_bias": True,
           "norm_type": "low_precision_layernorm",
           "attn_config": {"attn_type": "grouped_query_attention", "kv_n_heads": 2, "alibi": True},
           "ffn_config": {"ffn_type": "mptmlp"},
           "foundry": {"batch_size": BATCH, "seq_len": SEQ, "seed": 0}}
    model = families.seeded_model(cfg).train()
    input_ids, labels = families.make_inputs(cfg)
    path = os.path.join(tmp, "mpt_functions.onnx")
    torch.onnx.export(model, (input_ids, labels), path, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["input_ids", "labels"], output_names=["loss"],
                      export_modules_as_functions={mpt.MPTBlock, mpt.GroupedQueryAttention,
                                                   mpt.MultiheadAttention, mpt.MultiQueryAttention,
                                                   mpt.MPTMLP, mpt.LPLayerNorm})
    check(len(onnx.load(path).functions) >= 4, "torch wrote no functions: its export changed")
    listing = run([os.path.join(BIN, "foundry-compile"), path, "--list-modules"]).stdout
    rows = {line.split()[0]: line.split()[1] for line in listing.splitlines()[1:]
            if len(line.split()) > 1 and line.startswith(" ")}
    for n in range(layers):
        block = f"transformer.blocks.{n}"
        check(rows.get(block) == "MPTBlock" and rows.get(block + ".attn") == "GroupedQueryAttention",
              f"functions MPT: {block} or its attn is missing or misclassed:\n{listing}")
    save_tensor(os.path.join(tmp, "f_ids.pb"), input_ids.numpy().astype(np.int64))
    save_tensor(os.path.join(tmp, "f_labels.pb"), labels.numpy().astype(np.int64))
    grads = {}
    for ckpt in ([], ["--ckpt", "grouped_query_attention"]):
        prefix = os.path.join(tmp, "mpt_functions" + ("_ckpt" if ckpt else ""))
        out = run([os.path.join(BIN, "foundry-compile"), path, "-o", prefix] + ckpt).stdout
        if ckpt:
            check(f"remat: {layers} instances checkpointed" in out,
                  f"functions MPT: --ckpt grouped_query_attention:\n{out}")
        d = prefix + "_grads"
        run([os.path.join(BIN, "foundry-run"), prefix, "--device", "cpu", "--steps", "1",
             "--optimizer", "sgd", "--feed", "input_ids=" + os.path.join(tmp, "f_ids.pb"),
             "--feed", "labels=" + os.path.join(tmp, "f_labels.pb"), "--dump-grads", d])
        grads[bool(ckpt)] = {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)}
    check(grads[True] == grads[False], "functions MPT: --ckpt changes the gradients' bits")
    model.zero_grad()
    model(input_ids, labels).backward()
    worst = 0.0
    for name, p in model.named_parameters():
        w = p.grad.numpy().astype(np.float64)
        t = onnx.TensorProto()
        t.ParseFromString(grads[False][name + "_grad.pb"])
        g = numpy_helper.to_array(t).astype(np.float64)
        worst = max(worst, float(np.max(np.abs(g - w))) / max(float(np.max(np.abs(w))), 1e-12))
    check(worst <= GRAD_TOL, f"functions MPT: gradients differ from torch's by {worst:.3g}")
    return f"{layers} blocks and attentions classed, --ckpt bitwise, worst relative error {worst:.2g}"


def main():
    for tool in ("foundry-compile", "foundry-run"):
        if not os.access(os.path.join(BIN, tool), os.X_OK):
            print(f"FAIL: {os.path.join(BIN, tool)} not built (set FOUNDRY_BIN_DIR)")
            return 1
    torch.set_num_threads(1)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="foundry-stock-") as tmp:
        for cls in (GPT2, Llama, MaskMPT, TwiceCalled, OPT):
            try:
                print(f"ok   {cls.__name__}: {check_model(cls, tmp)}")
            except Exception:  # noqa: BLE001 -- report every model, then fail
                failed += 1
                print(f"FAIL {cls.__name__}")
                traceback.print_exc(file=sys.stdout)
        try:
            print(f"ok   functions MPT: {check_functions_mpt(tmp)}")
        except Exception:  # noqa: BLE001
            failed += 1
            print("FAIL functions MPT")
            traceback.print_exc(file=sys.stdout)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
