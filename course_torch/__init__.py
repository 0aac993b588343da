"""The course's kernels as PyTorch operators (module 08's torch_ops; notes/08_training.md).

    python3 -m course_torch check  [--variant learner|solution|fast]   opcheck, gradcheck, compile
    python3 -m course_torch train  [--variant ...] [--steps 300]       the GPT stock and swapped
    python3 -m course_torch bench  [--variant ...]                     each op against PyTorch's
    python3 -m course_torch profile [--variant ...] [--ops ...]        where a step's time goes
    python3 -m course_torch build  [--variant ...]                     the extension alone

The package builds one PyTorch extension from the exercises' files (the learner's stubs, the
readable solutions, or the fast references where an exercise has one) and the binding of
08_training/torch_ops (torch_ops.cpp: the ops' CUDA implementations; torch_ops.py: their fakes,
backwards and autocast rules), then checks the ops, trains trainer/torch_check.py's GPT with them
and times them. It adds no kernel: every op runs an exercise's contract function.

Modules: plan (which files, pure Python: CI tests it without PyTorch), extension (the build and
the registrations), checks, model, bench, step_profile.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
