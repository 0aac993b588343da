#!/usr/bin/env python3
"""PyTorch's fused attention on module 07's timed shapes, for the notes (course authors, on a GPU).

    python3 dev/attention_sdpa_torch.py            # B 4, H 16, T 4096, D 64 and 128, causal and not

Times torch.nn.functional.scaled_dot_product_attention in bf16 with each fused backend PyTorch
has here (FlashAttention-2, cuDNN), forward and forward + backward, by CUDA events, L2 flushed
before each sample, median of 30. FLOPs as module 07's checkers count them: 4 B H T^2 D forward,
2.5 times that backward, halved when causal. The grader's targets do not use these figures (they
are another process, another library): notes/07_attention.md quotes them next to the course's.
"""
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, T = 4, 16, 4096
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def median_ms(fn, samples=30):
    for _ in range(3):
        fn()
    times = []
    for _ in range(samples):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("backend  D    causal  forward TFLOP/s  backward TFLOP/s")
    for D in (64, 128):
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
        for causal in (False, True):
            flops = 4.0 * B * H * T * T * D * (0.5 if causal else 1.0)
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                                  ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        forward = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        out = forward()
                        fwd = median_ms(forward)
                        backward = lambda: torch.autograd.grad(out, (q, k, v), dout,
                                                               retain_graph=True)
                        bwd = median_ms(backward)
                    print(f"{name:8} {D:<4} {str(causal):7} {flops / fwd / 1e9:15.0f}"
                          f"  {2.5 * flops / bwd / 1e9:16.0f}")
                except RuntimeError as error:  # a backend PyTorch cannot use here
                    print(f"{name:8} {D:<4} {str(causal):7} unavailable: {str(error)[:80]}")


if __name__ == "__main__":
    main()
