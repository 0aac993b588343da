"""trainer/torch_check.py's GPT with the course's ops swapped in, op by op, trained beside the
stock model from the same weights and data: the loss curves and the time per step.

The tolerance of the curves is measured in the same run: the stock model trained a second time
in float32 (TF32 off) gives the spread between two valid implementations that round differently
(float32 against bfloat16 autocast), and the swapped model may part from the stock one by 1.5
times that spread (the 10-step means, as module 08's train_gpt compares the trainer's curves).
"""
import importlib.util
import math
import statistics
from pathlib import Path

import numpy as np
import torch

from course_torch import ROOT

_spec = importlib.util.spec_from_file_location("torch_check", ROOT / "trainer" / "torch_check.py")
torch_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(torch_check)

# The small preset of the C++ trainer (trainer/gpt.cu) and module 08's train_gpt run (grader/
# trainer.py SMALL_RUN): rows = B * T = 1560 tokens, multiples of nothing but 8 (the bf16 GEMM's
# contract needs 8).
SMALL = {"layers": 6, "channels": 384, "heads": 6, "max_seq_len": 256}
BATCH, SEQ_LEN = 8, 195
LEARNING_RATE = 6e-4
CURVE_WINDOW = 10
SPREAD_FACTOR = 1.5
SPEED_TARGET = 0.8  # the issue's: a swapped step within 80% of stock eager's speed
SWAPPABLE = ("layer_norm", "linear", "attention", "gelu", "cross_entropy")


class CourseOps(torch_check.TorchOps):
    """TorchOps with the ops of `swapped` replaced by the course's (torch.ops.course.*)."""

    def __init__(self, swapped=SWAPPABLE):
        unknown = set(swapped) - set(SWAPPABLE)
        if unknown:
            raise ValueError(f"unknown ops {sorted(unknown)}: the model's are {SWAPPABLE}")
        for name in swapped:
            setattr(self, name, getattr(self, f"_course_{name}"))

    @staticmethod
    def _course_layer_norm(x, weight, bias):
        return torch.ops.course.layernorm(x, weight, bias)[0]

    @staticmethod
    def _course_linear(x, weight, bias=None):
        # x @ W^T: W.t() is gemm_bf16's B operand as stored (no copy); sgemm copies it.
        y = torch.ops.course.mm(x.reshape(-1, x.shape[-1]), weight.t())
        if bias is not None:
            y = y + bias.to(y.dtype)  # as F.linear under autocast: the bias in the product's dtype
        return y.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def _course_attention(q, k, v):
        return torch.ops.course.attention(q, k, v, True)[0]

    @staticmethod
    def _course_gelu(x):
        return torch.ops.course.gelu(x)

    @staticmethod
    def _course_cross_entropy(logits, targets):
        return torch.ops.course.cross_entropy(logits, targets)[0]


def small_config(data: Path) -> dict:
    vocab = int(np.fromfile(data / "tokenizer.bin", dtype=np.uint32, count=3)[2])
    return {**SMALL, "vocab_size": vocab, "padded_vocab_size": (vocab + 127) // 128 * 128}


def initial_weights(config: dict, seed: int = 0) -> torch.Tensor:
    """GPT-2's initialization, flat in train_gpt's order (torch_check.NAMES): N(0, 0.02) for the
    embeddings and matrices (the residual projections scaled by 1 / sqrt(2 layers)), zero
    biases, LayerNorm weights one."""
    generator = torch.Generator().manual_seed(seed)
    pieces = []
    for name, shape in zip(torch_check.NAMES, torch_check.shapes(config)):
        if name in ("ln1w", "ln2w", "lnfw"):
            pieces.append(torch.ones(shape))
        elif name.endswith("b"):
            pieces.append(torch.zeros(shape))
        else:
            scale = 0.02 / math.sqrt(2 * config["layers"]) if name in ("attprojw", "fcprojw") else 0.02
            pieces.append(torch.randn(shape, generator=generator) * scale)
    return torch.cat([piece.reshape(-1) for piece in pieces])


def train(config: dict, flat: torch.Tensor, data: Path, steps: int, ops, autocast: bool):
    """(losses, seconds per step) of one run from `flat`, on the course's Shakespeare shards."""
    model = torch_check.Gpt(config, flat, ops).cuda()
    loader = torch_check.Loader(str(data / "train_*.bin"), BATCH, SEQ_LEN)
    seconds = []
    losses, _ = torch_check.train_torch(model, loader, steps, LEARNING_RATE, max(1, steps // 10),
                                        torch.bfloat16 if autocast else None, seconds)
    return losses, seconds


def means(losses: list[float], window: int = CURVE_WINDOW) -> list[float]:
    return [statistics.fmean(losses[i:i + window]) for i in range(0, len(losses), window)]


def largest_gap(a: list[float], b: list[float]) -> tuple[float, int]:
    """The largest gap of the 10-step means (NaN counts as infinite) and its window's index."""
    gaps = [abs(x - y) if not (math.isnan(x) or math.isnan(y)) else math.inf
            for x, y in zip(means(a), means(b))]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    return gaps[worst], worst


def step_ms(seconds: list[float]) -> float:
    """The median step, without the first tenth (allocations, cuBLAS's plans, autotuning)."""
    return 1e3 * statistics.median(seconds[len(seconds) // 10:])


def train_both(data: Path, steps: int, out: Path, swapped=SWAPPABLE) -> bool:
    """The stock model (bf16 autocast, and float32 for the tolerance) and the swapped one, from
    the same weights and batches; prints the curves and the verdict, writes a CSV (and a PNG where
    matplotlib is installed) into `out`. True when the curves overlap and the speed target is met."""
    if not list(data.glob("train_*.bin")):
        print(f"no training data in {data}: run python3 trainer/prepare_data.py where pip works")
        return False
    config = small_config(data)
    flat = initial_weights(config)
    print(f"GPT small preset ({config['layers']} layers, C {config['channels']}, "
          f"{config['heads']} heads), B {BATCH} x T {SEQ_LEN}, {steps} steps, "
          f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    stock, stock_s = train(config, flat, data, steps, torch_check.TorchOps, autocast=True)
    fp32, _ = train(config, flat, data, steps, torch_check.TorchOps, autocast=False)
    swapped_losses, swapped_s = train(config, flat, data, steps, CourseOps(swapped), autocast=True)
    spread, _ = largest_gap(stock, fp32)
    tolerance = SPREAD_FACTOR * spread
    gap, where = largest_gap(swapped_losses, stock)
    names = ", ".join(swapped)
    print(f"\nloss, means of {CURVE_WINDOW} steps (stock: PyTorch's ops, bf16 autocast; swapped: "
          f"the course's {names}, bf16 autocast; fp32: stock without autocast)")
    print("| steps | stock | swapped | fp32 |")
    print("|---|---:|---:|---:|")
    rows = list(zip(means(stock), means(swapped_losses), means(fp32)))
    for index, (a, b, c) in enumerate(rows):
        if index % 3 == 0 or index == len(rows) - 1:
            first = index * CURVE_WINDOW + 1
            print(f"| {first}-{min(first + CURVE_WINDOW - 1, steps)} | {a:.4f} | {b:.4f} | {c:.4f} |")
    overlap = gap <= tolerance
    print(f"\ncurves: largest gap swapped-stock {gap:.4f} (steps {where * CURVE_WINDOW + 1}-"
          f"{(where + 1) * CURVE_WINDOW}); tolerance {tolerance:.4f} = {SPREAD_FACTOR} x the "
          f"largest gap fp32-stock ({spread:.4f}): {'overlap' if overlap else 'PART'}")
    stock_ms, swapped_ms = step_ms(stock_s), step_ms(swapped_s)
    ratio = stock_ms / swapped_ms
    fast_enough = ratio >= SPEED_TARGET
    print(f"step time (median, first tenth left out): stock eager {stock_ms:.2f} ms, swapped "
          f"{swapped_ms:.2f} ms: the swapped step runs at {100 * ratio:.0f}% of stock eager's "
          f"speed (target {100 * SPEED_TARGET:.0f}%: {'met' if fast_enough else 'NOT met'})")
    _write_curves(out, stock, swapped_losses, fp32)
    return overlap and fast_enough


def _write_curves(out: Path, stock, swapped, fp32) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "loss_curves.csv", "w", encoding="utf-8") as file:
        file.write("step,stock_bf16,swapped_bf16,stock_fp32\n")
        for step, row in enumerate(zip(stock, swapped, fp32), start=1):
            file.write(f"{step}," + ",".join(f"{value:.6f}" for value in row) + "\n")
    try:
        from matplotlib.figure import Figure
    except ImportError:
        print(f"curves: {out / 'loss_curves.csv'} (matplotlib is not installed: no PNG)")
        return
    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.add_subplot()
    for losses, label in ((stock, "stock (PyTorch's ops)"), (swapped, "swapped (the course's ops)"),
                          (fp32, "stock, float32")):
        averaged = means(losses)
        axes.plot([CURVE_WINDOW * (i + 1) for i in range(len(averaged))], averaged, label=label)
    axes.set_xlabel("step")
    axes.set_ylabel(f"training loss ({CURVE_WINDOW}-step means)")
    axes.legend()
    axes.grid(True, alpha=0.3)
    figure.savefig(out / "loss_curves.png", dpi=120)
    print(f"curves: {out / 'loss_curves.csv'}, {out / 'loss_curves.png'}")
