#!/usr/bin/env python3
"""Author script: the C++ trainer against the same model in PyTorch (needs torch and a GPU).

    python3 trainer/torch_check.py agree --train-gpt build/trainer/bin/train_gpt --dtype fp32
    python3 trainer/torch_check.py agree --train-gpt build/trainer/bin/train_gpt --dtype fp16
    python3 trainer/torch_check.py bench --train-gpt build/trainer/bin/train_gpt
    python3 trainer/torch_check.py train --train-gpt build/trainer/bin/train_gpt --steps 1000

agree: train_gpt writes its step-0 weights, batch, logits, loss and gradients (--dump-step0)
    and trains a few steps; PyTorch rebuilds the model from those weights, checks the logits, the
    loss and every parameter's gradient, then trains the same steps (same data order, AdamW,
    schedule, clipping) and checks the losses step by step. The tolerances are stated below per
    mode: the all-fp32 trainer against fp32 PyTorch (TF32 off) agrees to rounding; the bf16
    trainer is compared with the same fp32 PyTorch and agrees to bf16's precision; the fp16
    trainer (loss scaling) with PyTorch's fp16 autocast and GradScaler, the way a PyTorch user
    trains in fp16: the step-0 gradients of the scaled loss, unscaled, and the steps' losses (a
    step that overflowed is skipped by both), to fp16's precision.
bench: tokens/s, MFU and peak memory of a training step of GPT-2 124M (B=16, T=1024, bf16):
    train_gpt, then PyTorch eager and torch.compile on the same model, in one process each.
train: both train the same model from the same weights and data for --steps steps; the final
    validation losses are compared (the issue's target: within 0.02) and a sample is printed.
Exit status 0 when every check passed, 1 otherwise.
"""

import argparse
import glob
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the pytest wrapper skips; run by hand, say so
    torch = None

# The parameter tensors in train_gpt's order (trainer/gpt.h: ParamTensor) and their shapes.
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}
H100_PEAK_TFLOPS = 989.4  # dense bf16; train_gpt's table has the others
TOLERANCES = {  # (loss, logits max abs, gradient max error / tensor's max |grad|, loss curve's 10-step means)
    "fp32": (1e-4, 2e-3, 2e-3, 1e-2),
    "bf16": (3e-2, 0.15, 0.1, 6e-2),
    # fp16 keeps 3 more bits than bf16; PyTorch's autocast keeps LayerNorm and the residual
    # stream in fp32 where train_gpt stores fp16.
    "fp16": (1e-2, 3e-2, 3e-2, 4e-2),
}
AUTOCAST = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16} if torch else {}


def shapes(c):
    L, C = c["layers"], c["channels"]
    return [(c["padded_vocab_size"], C), (c["max_seq_len"], C), (L, C), (L, C), (L, 3 * C, C),
            (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C), (L, 4 * C, C), (L, 4 * C),
            (L, C, 4 * C), (L, C), (C,), (C,)]


def read_meta(path):
    meta = {}
    for line in Path(path).read_text().splitlines():
        key, value = line.split()
        meta[key] = float(value) if key == "loss" else int(value)
    return meta


class TorchOps:
    """The model's ops as PyTorch has them. Module 08's torch_ops swaps the course's in, op by op
    (course_torch/model.py: the same names, the learner's kernels behind them)."""

    @staticmethod
    def layer_norm(x, weight, bias):
        return F.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)

    @staticmethod
    def linear(x, weight, bias=None):
        return F.linear(x, weight, bias)

    @staticmethod
    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    @staticmethod
    def gelu(x):
        return F.gelu(x, approximate="tanh")

    @staticmethod
    def cross_entropy(logits, targets):
        return F.cross_entropy(logits, targets)


class Gpt(torch.nn.Module if torch else object):
    """GPT-2 as train_gpt builds it (tied LM head, padded vocabulary, tanh GELU), written the way
    a PyTorch user would: one set of parameters per layer, attention through SDPA. `ops` gives
    the ops (TorchOps's names)."""

    def __init__(self, config, flat, ops=TorchOps):
        super().__init__()
        self.c = config
        self.ops = ops
        tensors, offset = {}, 0
        for name, shape in zip(NAMES, shapes(config)):
            n = math.prod(shape)
            tensors[name] = flat[offset:offset + n].view(shape)
            offset += n
        parameter = lambda t: torch.nn.Parameter(t.clone())
        self.wte, self.wpe = parameter(tensors["wte"]), parameter(tensors["wpe"])
        self.lnfw, self.lnfb = parameter(tensors["lnfw"]), parameter(tensors["lnfb"])
        self.layers = torch.nn.ModuleList(
            torch.nn.ParameterDict({name: parameter(tensors[name][l]) for name in NAMES[2:14]})
            for l in range(config["layers"]))

    def tensor(self, name):
        """train_gpt's tensor `name`: per-layer parameters stacked in layer order."""
        if name in NAMES[2:14]:
            return [layer[name] for layer in self.layers]
        return [getattr(self, name)]

    def flat_grad(self, name):
        return torch.stack([p.grad for p in self.tensor(name)]).reshape(-1)

    def forward(self, idx):
        c, ops = self.c, self.ops
        B, T = idx.shape
        C, NH = c["channels"], c["heads"]
        x = self.wte[idx] + self.wpe[:T]
        for p in self.layers:
            h = ops.layer_norm(x, p["ln1w"], p["ln1b"])
            q, k, v = ops.linear(h, p["qkvw"], p["qkvb"]).split(C, dim=2)
            q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            y = ops.attention(q, k, v)
            x = x + ops.linear(y.transpose(1, 2).reshape(B, T, C), p["attprojw"], p["attprojb"])
            h = ops.layer_norm(x, p["ln2w"], p["ln2b"])
            h = ops.gelu(ops.linear(h, p["fcw"], p["fcb"]))
            x = x + ops.linear(h, p["fcprojw"], p["fcprojb"])
        x = ops.layer_norm(x, self.lnfw, self.lnfb)
        return ops.linear(x, self.wte)  # [B, T, Vp]

    def loss(self, idx, targets):
        V = self.c["vocab_size"]
        logits = self(idx)[..., :V]
        return self.ops.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1))


def flops_per_token(c, T):
    """train_gpt's count (gpt.cu: flops_per_token): 6 per matrix parameter plus attention."""
    matrix_params = sum(math.prod(s) for s in shapes(c)) - c["max_seq_len"] * c["channels"]
    return 6 * matrix_params + 12 * c["layers"] * c["channels"] * T


class Loader:
    """train_gpt's TokenLoader: shards in sorted order, B*T+1 tokens per batch, wrapping."""

    def __init__(self, pattern, B, T):
        self.files = sorted(glob.glob(pattern))
        self.B, self.T, self.shard, self.offset = B, T, 0, 0
        self.tokens = self.read(0)

    def read(self, i):
        return np.fromfile(self.files[i], dtype=np.uint16, offset=1024).astype(np.int64)

    def next(self, device):
        span = self.B * self.T
        if self.offset + span + 1 > len(self.tokens):
            self.shard = (self.shard + 1) % len(self.files)
            self.offset = 0
            self.tokens = self.read(self.shard)
        chunk = torch.from_numpy(self.tokens[self.offset:self.offset + span + 1]).to(device)
        self.offset += span
        return chunk[:-1].view(self.B, self.T), chunk[1:].view(self.B, self.T)


def learning_rate(step, steps, lr, warmup, min_fraction=0.1):
    """train_gpt's schedule (train_gpt.cu: learning_rate)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return lr * min_fraction + (lr - lr * min_fraction) * 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(model, lr, fused=False):
    decayed = [p for n in NAMES if n in DECAYED for p in model.tensor(n)]
    rest = [p for n in NAMES if n not in DECAYED for p in model.tensor(n)]
    return torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1},
                              {"params": rest, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)


def clip(model, max_norm=1.0):
    """train_gpt's clipping: scale by max_norm / norm when the norm is above max_norm."""
    grads = [p.grad for p in model.parameters()]
    norm = torch.sqrt(sum((g.float() ** 2).sum() for g in grads))
    scale = torch.clamp(max_norm / norm, max=1.0)
    torch._foreach_mul_(grads, scale)
    return norm


def train_torch(model, loader, steps, lr, warmup, autocast, seconds=None):
    """The losses of `steps` steps and how many were skipped. autocast: None (fp32), torch.bfloat16,
    or torch.float16 with GradScaler (its defaults are train_gpt's: trainer/loss_scaler.h). Each
    step's wall time is appended to `seconds` if given (loss.item() waits for the step's kernels)."""
    optimizer = make_optimizer(model, lr)
    scaler = torch.amp.GradScaler("cuda", enabled=autocast == torch.float16)
    losses, skipped = [], 0
    for step in range(steps):
        start = time.perf_counter()
        x, y = loader.next("cuda")
        with torch.autocast("cuda", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            loss = model.loss(x, y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)  # clipping sees the true gradients
        clip(model)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, steps, lr, warmup)
        scale = scaler.get_scale()
        scaler.step(optimizer)  # skipped where the gradients overflowed
        scaler.update()
        skipped += scaler.get_scale() < scale
        losses.append(loss.item())
        if seconds is not None:
            seconds.append(time.perf_counter() - start)
    return losses, skipped


def run(command, log):
    print("$", " ".join(map(str, command)), flush=True)
    # A sample may end inside a character's bytes: decode what is printed leniently.
    result = subprocess.run(list(map(str, command)), capture_output=True, text=True, errors="replace")
    Path(log).write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        sys.exit(f"train_gpt failed ({result.returncode}): {(result.stderr or result.stdout).strip()[-2000:]}")
    return result.stdout


def read_csv_losses(path):
    rows = [line.split(",") for line in Path(path).read_text().splitlines()[1:]]
    return [float(r[1]) for r in rows if r[1]]


def report(name, value, limit):
    ok = value <= limit
    print(f"  {name:<34} {value:11.3e}  (limit {limit:.0e})  {'ok' if ok else 'FAIL'}")
    return ok


def agree(args):
    out = Path(args.out) / f"agree_{args.dtype}_{args.attention}"
    steps = args.steps
    run([args.train_gpt, "--data", args.data, "-m", args.model, "--dtype", args.dtype, "-b", args.batch,
         "-t", args.seq_len, "--steps", steps, "--val-every", 0, "--sample-length", 0,
         "--attention", args.attention, "--no-checkpoint", "--out", out, "--dump-step0", out / "step0"],
        out.with_suffix(".log"))
    meta = read_meta(out / "step0/meta.txt")
    c, B, T = meta, meta["B"], meta["T"]
    dump = lambda name, dtype: np.fromfile(out / "step0" / name, dtype=dtype)
    params = torch.from_numpy(dump("params.bin", np.float32)).cuda()
    inputs = torch.from_numpy(dump("inputs.bin", np.int32).astype(np.int64)).cuda().view(B, T)
    targets = torch.from_numpy(dump("targets.bin", np.int32).astype(np.int64)).cuda().view(B, T)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # fp32 PyTorch for fp32 and bf16; for fp16, PyTorch's fp16 autocast with the loss scaled as
    # GradScaler scales it (train_gpt's dump does the same and divides the gradients back).
    reference = AUTOCAST["fp16"] if args.dtype == "fp16" else None
    model = Gpt(c, params).cuda()
    with torch.autocast("cuda", dtype=torch.float16, enabled=reference is not None):
        logits = model(inputs)
    V = c["vocab_size"]
    loss = F.cross_entropy(logits[..., :V].float().reshape(-1, V), targets.reshape(-1))
    scaler = torch.amp.GradScaler("cuda", enabled=reference is not None)
    scaler.scale(loss).backward()
    loss_scale = scaler.get_scale()
    ours_logits = torch.from_numpy(dump("logits.bin", np.float32)).cuda().view(B, T, -1)
    ours_grads = torch.from_numpy(dump("grads.bin", np.float32)).cuda()
    tol_loss, tol_logits, tol_grads, tol_curve = TOLERANCES[args.dtype]
    against = "PyTorch's fp16 autocast and GradScaler" if reference else "fp32 PyTorch"
    print(f"agree ({args.dtype}, model {args.model}, B={B} T={T}, --attention {args.attention}): "
          f"train_gpt against {against}")
    ok = report("step-0 loss |difference|", abs(meta["loss"] - loss.item()), tol_loss)
    ok &= report("step-0 logits max |difference|", (ours_logits[..., :V] - logits[..., :V].float()).abs().max().item(), tol_logits)
    offset, worst, worst_name = 0, 0.0, ""
    for name in NAMES:
        theirs = model.flat_grad(name) / loss_scale
        ours = ours_grads[offset:offset + theirs.numel()]
        offset += theirs.numel()
        scale = theirs.abs().max().item()
        error = (ours - theirs).abs().max().item() / max(scale, 1e-30)
        if error > worst:
            worst, worst_name = error, name
    ok &= report(f"gradients, worst tensor ({worst_name})", worst, tol_grads)
    # The same steps in PyTorch from the same weights; losses side by side.
    torch_losses = lambda autocast: train_torch(Gpt(c, params).cuda(), Loader(f"{args.data}/train_*.bin", B, T),
                                                steps, 6e-4, steps // 10, autocast=autocast)
    theirs, their_skips = torch_losses(autocast=reference)
    ours = read_csv_losses(out / "loss.csv")
    # Judged on the means of 10 steps, the curve one plots: a step's loss is one small batch's, and
    # two bf16 runs that round differently reach slightly different weights, which one batch can
    # magnify (a systematic error moves the means as well). The largest single step for scale.
    means = lambda losses: [sum(losses[i:i + 10]) / len(losses[i:i + 10]) for i in range(0, steps, 10)]
    gap = max(abs(a - b) for a, b in zip(means(ours), means(theirs)))
    ok &= report("losses, means of 10 steps, max |difference|", gap, tol_curve)
    gaps = [abs(a - b) for a, b in zip(ours, theirs)]
    worst = gaps.index(max(gaps))
    print(f"  (one step: at most {gaps[worst]:.3e}, at step {worst + 1}: {ours[worst]:.4f} against "
          f"{theirs[worst]:.4f})")
    if args.dtype != "fp32":  # for scale: PyTorch's own autocast in this dtype against its fp32
        autocast = theirs if reference is not None else torch_losses(autocast=AUTOCAST[args.dtype])[0]
        fp32 = theirs if reference is None else torch_losses(autocast=None)[0]
        own = max(abs(a - b) for a, b in zip(means(autocast), means(fp32)))
        one = max(abs(a - b) for a, b in zip(autocast, fp32))
        print(f"  (PyTorch's autocast {args.dtype} against its fp32: means {own:.3e}, one step {one:.3e})")
    if args.dtype == "fp16":  # train_gpt prints "fp16 loss scaling: N of M steps skipped ..."
        ours_skips = re.search(r"fp16 loss scaling: (\d+) of", (out.with_suffix(".log")).read_text())
        print(f"  steps skipped (overflow): train_gpt {ours_skips[1] if ours_skips else '?'}, "
              f"PyTorch's GradScaler {their_skips}")
    print("  step, train_gpt, PyTorch: " + "; ".join(
        f"{s + 1} {ours[s]:.4f} {theirs[s]:.4f}" for s in sorted({0, 4, 9, 19, 29, 39, steps - 1}) if s < steps))
    return ok


def time_torch(model, loader, steps, compiled):
    """Seconds per training step (after 3 warm-up steps, which compile) and peak memory."""
    optimizer = make_optimizer(model, 6e-4, fused=True)
    loss_fn = torch.compile(model.loss) if compiled else model.loss

    def step():
        x, y = loader.next("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip(model)
        optimizer.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps, torch.cuda.max_memory_allocated()


def bench(args):
    B, T, steps = 16, 1024, args.steps
    out = Path(args.out) / "bench"
    text = run([args.train_gpt, "--data", args.data, "-m", "gpt2-124m", "-b", B, "-t", T, "--steps",
                steps + 1, "--val-every", 0, "--sample-length", 0, "--no-checkpoint", "--out", out],
               str(out) + ".log")
    found = re.search(r"mean over \d+ steps: ([\d.]+) ms/step, (\d+) tok/s.*in use after the first step: ([\d.]+) GiB", text)
    ours_ms, ours_tps, ours_gib = float(found[1]), float(found[2]), float(found[3])
    tokenizer_vocab = np.fromfile(f"{args.data}/tokenizer.bin", dtype=np.uint32, count=3)[2]
    c = {"layers": 12, "channels": 768, "heads": 12, "max_seq_len": 1024,
         "vocab_size": int(tokenizer_vocab), "padded_vocab_size": (int(tokenizer_vocab) + 127) // 128 * 128}
    flops = flops_per_token(c, T)
    rows = [("train_gpt (reference ops)", ours_ms, ours_tps, ours_gib, "memory in use on the GPU")]
    torch.backends.cuda.matmul.allow_tf32 = True
    for compiled in (False, True):
        torch.manual_seed(0)
        flat = torch.randn(sum(math.prod(s) for s in shapes(c))) * 0.02
        model = Gpt(c, flat).cuda()
        loader = Loader(f"{args.data}/train_*.bin", B, T)
        seconds, peak = time_torch(model, loader, steps, compiled)
        rows.append((f"PyTorch {torch.__version__} {'torch.compile' if compiled else 'eager'}",
                     1e3 * seconds, B * T / seconds, peak / 2**30, "torch.cuda.max_memory_allocated"))
        del model
        torch.cuda.empty_cache()
    print(f"\nGPT-2 124M training step, B={B} T={T}, bf16, {torch.cuda.get_device_name()}; "
          f"MFU = {flops / 1e6:.0f} MFLOP/token x tokens/s / {H100_PEAK_TFLOPS} TFLOP/s")
    print(f"| {'implementation':<34} | ms/step | tokens/s | MFU | peak memory (GiB) |")
    print(f"|{'-' * 36}|--------:|---------:|----:|------------------:|")
    for name, ms, tps, gib, note in rows:
        print(f"| {name:<34} | {ms:7.1f} | {tps:8.0f} | {100 * flops * tps / (H100_PEAK_TFLOPS * 1e12):3.0f}% | {gib:6.2f} ({note}) |")
    return True


def train(args):
    B, T = args.batch, args.seq_len
    out = Path(args.out) / f"train_{args.model}"
    # The initial weights: a run of 0 steps saves them as its checkpoint (a header of 64 int32).
    run([args.train_gpt, "--data", args.data, "-m", args.model, "-b", B, "-t", T, "--steps", 0,
         "--val-every", 0, "--sample-length", 0, "--out", out / "init"], str(out) + "_init.log")
    header = np.fromfile(out / "init/model.ckpt", dtype=np.int32, count=8)
    meta = dict(zip(["layers", "channels", "heads", "max_seq_len", "vocab_size", "padded_vocab_size"],
                    map(int, header[2:8])))
    count = sum(math.prod(s) for s in shapes(meta))
    params = torch.from_numpy(np.fromfile(out / "init/model.ckpt", dtype=np.float32, count=count,
                                          offset=256)).cuda()
    text = run([args.train_gpt, "--data", args.data, "-m", args.model, "-b", B, "-t", T, "--steps",
                args.steps, "--val-every", max(1, args.steps // 4), "--val-batches", 20,
                "--sample-length", 96, "--temperature", 0.8, "--no-checkpoint", "--out", out],
               str(out) + ".log")
    ours = float(re.findall(r"val loss ([\d.]+)", text)[-1])
    torch.backends.cuda.matmul.allow_tf32 = True
    model = Gpt(meta, params).cuda()
    train_torch(model, Loader(f"{args.data}/train_*.bin", B, T), args.steps, 6e-4, args.steps // 10,
                autocast=torch.bfloat16)
    val = Loader(f"{args.data}/val_*.bin", B, T)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        theirs = sum(model.loss(*val.next("cuda")).item() for _ in range(20)) / 20
    print(f"train ({args.model}, {args.steps} steps of B={B} T={T}): final validation loss "
          f"train_gpt {ours:.4f}, PyTorch (bf16 autocast) {theirs:.4f}")
    ok = report("validation loss |difference|", abs(ours - theirs), 0.02)
    sample = text.split("--- sample ---\n")[-1].split("\n---")[0]
    print("train_gpt's sample (temperature 0.8, top-k 40):\n" + sample)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["agree", "bench", "train"])
    parser.add_argument("--train-gpt", default="build/trainer/bin/train_gpt")
    parser.add_argument("--data", default="data/shakespeare")
    parser.add_argument("--model", default="small")
    parser.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    parser.add_argument("--attention", choices=["cudnn", "flash"], default="cudnn")
    parser.add_argument("-b", "--batch", type=int, default=4)
    parser.add_argument("-t", "--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--out", default=os.environ.get("OUT", "out") + "/torch_check")
    args = parser.parse_args()
    if torch is None or not torch.cuda.is_available():
        sys.exit("torch_check: needs PyTorch and a CUDA GPU")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    ok = {"agree": agree, "bench": bench, "train": train}[args.what](args)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
