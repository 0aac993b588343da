"""train_gpt's data parallelism (trainer/launch.sh, trainer/data_parallel.h): the environment's
errors (CI: checked before the GPU is touched), one rank through NCCL against no NCCL at all (one
GPU), a rank with no GPU of its own stopping the run, and 2 GPUs at -b 2 against one at -b 4
(skipped below 2 GPUs)."""
import os
import subprocess
from pathlib import Path

import pytest

from test_cli import fails

LAUNCH = Path(__file__).resolve().parents[1] / "launch.sh"


def fails_with_env(train_gpt, monkeypatch, **env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return fails(train_gpt, "--steps", "1")


def test_world_without_rendezvous(train_gpt, monkeypatch):
    code, line = fails_with_env(train_gpt, monkeypatch, WORLD_SIZE="2")
    assert code == 2 and "WORLD_SIZE=2 without RENDEZVOUS: start the processes with trainer/launch.sh" in line


def test_rank_outside_the_world(train_gpt, monkeypatch, tmp_path):
    code, line = fails_with_env(train_gpt, monkeypatch, RANK="2", WORLD_SIZE="2", RENDEZVOUS=str(tmp_path))
    assert code == 2 and "RANK=2 with WORLD_SIZE=2: ranks go from 0 to 1" in line


def test_world_not_a_number(train_gpt, monkeypatch):
    code, line = fails_with_env(train_gpt, monkeypatch, WORLD_SIZE="two")
    assert code == 2 and "WORLD_SIZE=two: a whole number" in line


def test_launch_usage():
    result = subprocess.run([str(LAUNCH)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "usage: trainer/launch.sh N" in result.stderr


def gpus():
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return len([line for line in out.splitlines() if line.startswith("GPU ")])


def train(train_gpt, out, *args, launch=None):
    common = ["--val-every", "0", "--sample-length", "0", "--no-checkpoint", "--dtype", "fp32", "--out", str(out)]
    command = [str(LAUNCH), str(launch), *args, *common] if launch else [train_gpt, *args, *common]
    result = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=600,
                            env={**os.environ, "TRAIN_GPT": train_gpt})
    if "no CUDA GPU" in result.stderr:
        pytest.skip("no CUDA GPU")
    if "built without NCCL" in result.stderr:
        pytest.skip("this train_gpt was built without NCCL")
    return result


def losses(out):
    return [float(line.split(",")[1]) for line in (out / "loss.csv").read_text().splitlines()[1:]]


def test_one_rank_through_nccl_is_one_process(train_gpt, byte_data, tmp_path):
    """launch.sh 1: NCCL's all-reduce over one rank, bit for bit the run without it."""
    args = ["--data", str(byte_data), "-m", "tiny", "-b", "4", "--steps", "10"]
    alone = train(train_gpt, tmp_path / "alone", *args)
    assert alone.returncode == 0, alone.stderr
    launched = train(train_gpt, tmp_path / "launched", *args, launch=1)
    assert launched.returncode == 0, launched.stderr
    assert "x 1 GPUs" in launched.stdout
    assert losses(tmp_path / "launched") == losses(tmp_path / "alone")


def test_a_rank_without_a_gpu_stops_the_run(train_gpt, byte_data, tmp_path):
    n = gpus()
    if n == 0:
        pytest.skip("no CUDA GPU")
    result = train(train_gpt, tmp_path / "run", "--data", str(byte_data), "-m", "tiny", "--steps", "5",
                   launch=n + 1)
    assert result.returncode != 0
    assert f"rank {n} needs GPU {n}, this machine shows {n}" in result.stderr


def test_two_gpus_take_the_step_of_one_at_twice_the_batch(train_gpt, byte_data, tmp_path):
    if gpus() < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {gpus()}")
    args = ["--data", str(byte_data), "-m", "tiny", "--steps", "20"]
    one = train(train_gpt, tmp_path / "one", *args, "-b", "4")
    assert one.returncode == 0, one.stderr
    two = train(train_gpt, tmp_path / "two", *args, "-b", "2", launch=2)
    assert two.returncode == 0, two.stderr
    # fp32: the same sums in another order (two halves, then NCCL's sum of the two)
    assert losses(tmp_path / "two") == pytest.approx(losses(tmp_path / "one"), rel=1e-4)


def test_overlap_buckets_and_zero_take_the_same_steps(train_gpt, byte_data, tmp_path):
    """The three ways of summing the gradients (trainer/data_parallel.h) on 2 GPUs: in buckets of
    1 KB during the backward (every layer's tensors their own all-reduces), in one all-reduce
    after it, and ZeRO-1. Two ranks add a + b whatever the buckets: bit for bit the same run.
    ZeRO-1 sums the squared norm slice by slice: the same run within rounding."""
    if gpus() < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {gpus()}")
    args = ["--data", str(byte_data), "-m", "tiny", "--steps", "20", "-b", "2"]
    runs = {}
    for name, extra in {"buckets": ["--bucket-mb", "0.001"], "after": ["--bucket-mb", "0"],
                        "zero": ["--zero", "1"]}.items():
        result = train(train_gpt, tmp_path / name, *args, *extra, launch=2)
        assert result.returncode == 0, result.stderr
        runs[name] = losses(tmp_path / name)
    assert runs["buckets"] == runs["after"]
    assert runs["zero"] == pytest.approx(runs["after"], rel=1e-5)


def test_zero_checkpoint_resumes_the_run(train_gpt, byte_data, tmp_path):
    """ZeRO-1's checkpoint gathers every GPU's moments: 10 steps, then 10 more from its
    checkpoint, end where 20 steps in one go do."""
    if gpus() < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {gpus()}")
    common = ["--data", str(byte_data), "-m", "tiny", "-b", "2", "--zero", "1", "--dtype", "fp32",
              "--val-every", "0", "--sample-length", "0"]
    env = {**os.environ, "TRAIN_GPT": train_gpt}

    def launch(out, *args):
        result = subprocess.run([str(LAUNCH), "2", *common, "--out", str(out), *args],
                                capture_output=True, text=True, errors="replace", timeout=600,
                                env=env)
        assert result.returncode == 0, result.stderr
        return [float(line.split(",")[1]) for line in
                (out / "loss.csv").read_text().splitlines()[1:] if line.split(",")[1]]

    whole = launch(tmp_path / "whole", "--steps", "20")
    launch(tmp_path / "parts", "--steps", "20", "--checkpoint-every", "10")
    resumed = launch(tmp_path / "resumed", "--steps", "20", "--resume",
                     str(tmp_path / "parts" / "model_step10.ckpt"))
    assert resumed == pytest.approx(whole[10:], rel=1e-5)
