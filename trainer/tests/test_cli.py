"""train_gpt's command line: every bad input is one line on stderr with a non-zero exit, checked
before the GPU is needed (so these run in CI); prepare_data.py's files."""
import re
import subprocess

import numpy as np
import pytest


def fails(train_gpt, *args):
    result = subprocess.run([train_gpt, *map(str, args)], capture_output=True, text=True, errors="replace", timeout=60)
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return result.returncode, lines[0]


def test_prepared_files_are_llmc_formats(byte_data):
    header = np.fromfile(byte_data / "train_000.bin", dtype=np.int32, count=3)
    assert header[0] == 20240520 and header[1] == 1
    tokens = np.fromfile(byte_data / "train_000.bin", dtype=np.uint16, offset=1024)
    assert len(tokens) == header[2] and tokens[0] == 256  # a document starts with end-of-text
    tokenizer = np.fromfile(byte_data / "tokenizer.bin", dtype=np.uint32, count=4)
    assert list(tokenizer) == [20240328, 2, 257, 256]


def test_unknown_option(train_gpt):
    code, line = fails(train_gpt, "--bogus", "1")
    assert code == 2 and "unknown option --bogus" in line


def test_unknown_attention(train_gpt):
    code, line = fails(train_gpt, "--attention", "fast")
    assert code == 2 and "--attention fast: cudnn or flash" in line


def test_unknown_dtype(train_gpt):
    code, line = fails(train_gpt, "--dtype", "fp8")
    assert code == 2 and "--dtype fp8: bf16, fp16 or fp32" in line


@pytest.mark.parametrize("table", ["learner", "solutions", "fast"])
def test_fp16_has_no_exercise_tables(train_gpt, table):
    code, line = fails(train_gpt, "--dtype", "fp16", "--kernels", table)
    assert code == 2 and "module 08's exercise tables run in fp32 or bf16, not fp16" in line


def test_check_ops_takes_a_number_of_steps(train_gpt):
    code, line = fails(train_gpt, "--kernels", "learner", "--check-ops", "often")
    assert code == 2 and "--check-ops takes a number, not 'often'" in line


def test_kernel_choices_needs_a_file(train_gpt):
    code, line = fails(train_gpt, "--kernels", "learner", "--kernel-choices")
    assert code == 2 and "--kernel-choices needs a value" in line


def test_stop_at_must_come_before_the_last_step(train_gpt):
    code, line = fails(train_gpt, "--steps", 40, "--stop-at", 40)
    assert code == 2 and "--stop-at 40 is not before the last step (--steps 40)" in line


def test_time_limit_is_not_negative(train_gpt):
    code, line = fails(train_gpt, "--time-limit", -5)
    assert code == 2 and "--checkpoint-seconds and --time-limit must be 0 or more" in line


@pytest.mark.parametrize("top_p", [0, 1.5])
def test_top_p_is_a_share_of_the_probability(train_gpt, top_p):
    code, line = fails(train_gpt, "--top-p", top_p)
    assert code == 2 and "--top-p must be above 0 and at most 1" in line


@pytest.mark.parametrize("flag", ["--generate-batch", "--generate-bench"])
def test_generation_counts_start_at_one(train_gpt, flag):
    code, line = fails(train_gpt, flag, 0)
    assert code == 2 and f"{flag} must be at least 1" in line


def test_generate_or_its_bench(train_gpt):
    code, line = fails(train_gpt, "--generate", "--generate-bench", 16)
    assert code == 2 and "--generate and --generate-bench: one or the other" in line


def test_the_bench_times_both_ways(train_gpt):
    code, line = fails(train_gpt, "--generate-bench", 16, "--no-kv-cache")
    assert code == 2 and "--generate-bench times generation both ways: drop --no-kv-cache" in line


def test_quantize_takes_module_09s_formats(train_gpt):
    code, line = fails(train_gpt, "--quantize", "w8a16,int8")
    assert code == 2 and "--quantize w8a16,int8: formats w8a16 and w4a16, comma-separated" in line


def test_quantize_measures_a_checkpoint(train_gpt):
    code, line = fails(train_gpt, "--quantize", "w8a16")
    assert code == 2 and "--quantize measures a trained model: give its checkpoint with --resume" in line


def test_quantize_is_not_generation(train_gpt):
    code, line = fails(train_gpt, "--quantize", "w8a16", "--generate")
    assert code == 2 and "--quantize measures the validation loss: not with --generate" in line


def test_missing_shards(train_gpt, byte_data, tmp_path):
    code, line = fails(train_gpt, "--tokenizer", byte_data / "tokenizer.bin", "--train", tmp_path / "x_*.bin")
    assert code == 1 and "no data shard matches" in line


def test_corrupt_shard(train_gpt, byte_data, tmp_path):
    (tmp_path / "bad.bin").write_bytes(b"not tokens" * 200)
    code, line = fails(train_gpt, "--data", byte_data, "--train", tmp_path / "bad.bin")
    assert "not a token shard" in line


def test_context_longer_than_the_model(train_gpt, byte_data):
    code, line = fails(train_gpt, "--data", byte_data, "-m", "tiny", "-t", 65)
    assert code == 2 and "longer than the model's context (64)" in line


def checkpoint(path, layers, channels, heads, context, vocab, truncate=0):
    padded = (vocab + 127) // 128 * 128
    count = (padded + context) * channels + layers * (12 * channels * channels + 13 * channels) + 2 * channels
    header = np.zeros(64, dtype=np.int32)
    header[:8] = (0x47505431, 1, layers, channels, heads, context, vocab, padded)
    path.write_bytes(header.tobytes() + np.zeros(3 * count - truncate, dtype=np.float32).tobytes())


def test_checkpoint_of_another_model(train_gpt, byte_data, tmp_path):
    checkpoint(tmp_path / "other.ckpt", 2, 64, 4, 64, 300)
    code, line = fails(train_gpt, "--data", byte_data, "-m", "tiny", "--resume", tmp_path / "other.ckpt")
    assert "the checkpoint is a model of L=2 C=64 NH=4 T=64 V=300, this run builds" in line


def test_int4_groups_need_channels_in_128s(train_gpt, byte_data, tmp_path):
    checkpoint(tmp_path / "tiny.ckpt", 2, 64, 4, 64, 257)
    code, line = fails(train_gpt, "--data", byte_data, "--quantize", "w8a16,w4a16", "--resume", tmp_path / "tiny.ckpt")
    assert code == 1 and "tiny.ckpt: w4a16 quantizes groups of 128 along K: C = 64 is not a multiple of 128" in line


def test_truncated_checkpoint(train_gpt, byte_data, tmp_path):
    checkpoint(tmp_path / "cut.ckpt", 2, 64, 4, 64, 257, truncate=5)
    code, line = fails(train_gpt, "--data", byte_data, "--resume", tmp_path / "cut.ckpt")
    assert "truncated checkpoint" in line


def test_without_a_gpu_says_so(train_gpt, byte_data):
    result = subprocess.run([train_gpt, "--data", str(byte_data), "--steps", "1"], capture_output=True, text=True, errors="replace", timeout=120)
    if result.returncode == 0:
        pytest.skip("a GPU is present")
    assert result.stderr.strip() == "train_gpt: error: no CUDA GPU is visible: the trainer needs one"


@pytest.mark.parametrize("dtype", [[], ["--dtype", "fp16"]], ids=["default", "fp16"])
def test_resumed_run_repeats_the_uninterrupted_one(train_gpt, byte_data, tmp_path, dtype):
    """40 steps straight, and 20 steps resumed from the checkpoint of step 20: the same losses,
    bit for bit (weights, optimizer state, data position and fp16's loss scale all come back)."""
    common = ["--data", str(byte_data), "-m", "tiny", "-b", "4", "--steps", "40", "--val-every", "0",
              "--sample-length", "8", *dtype]
    straight = subprocess.run([train_gpt, *common, "--checkpoint-every", "20", "--out", str(tmp_path / "a")],
                              capture_output=True, text=True, errors="replace", timeout=300)
    if "no CUDA GPU" in straight.stderr:
        pytest.skip("no CUDA GPU")
    assert straight.returncode == 0, straight.stderr
    resumed = subprocess.run([train_gpt, *common, "--resume", str(tmp_path / "a/model_step20.ckpt"),
                              "--out", str(tmp_path / "b")], capture_output=True, text=True, errors="replace", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    losses = lambda run: [line.split(",")[:2] for line in (tmp_path / run / "loss.csv").read_text().splitlines()[1:]]
    assert losses("b") == losses("a")[20:]
    # fp16: the steps skipped over the whole run and the final scale, as the uninterrupted run's.
    scaling = lambda run: [line for line in run.stdout.splitlines() if line.startswith("fp16 loss scaling:")]
    assert scaling(resumed) == scaling(straight)


@pytest.mark.parametrize("dtype", [[], ["--dtype", "fp16"]], ids=["default", "fp16"])
def test_a_stopped_run_goes_on_in_its_folder_as_the_uninterrupted_one(train_gpt, byte_data, tmp_path, dtype):
    """Stopped after step 20 (--stop-at: exit status 3, latest.ckpt saved; step 20's validation is
    the resumed run's), with rows past the checkpoint left in loss.csv as a killed run leaves them,
    the last one cut short; resumed in the same folder: the loss curve is the uninterrupted run's,
    bit for bit, validations included (in fp16, the loss scaler's steps skipped and final scale
    too), and latest.ckpt is gone."""
    common = ["--data", str(byte_data), "-m", "tiny", "-b", "4", "--steps", "40", "--val-every", "10",
              "--val-batches", "2", "--sample-length", "0", "--no-checkpoint", *dtype]
    straight = subprocess.run([train_gpt, *common, "--out", str(tmp_path / "a")],
                              capture_output=True, text=True, errors="replace", timeout=300)
    if "no CUDA GPU" in straight.stderr:
        pytest.skip("no CUDA GPU")
    assert straight.returncode == 0, straight.stderr
    stopped = subprocess.run([train_gpt, *common, "--stop-at", "20", "--out", str(tmp_path / "b")],
                             capture_output=True, text=True, errors="replace", timeout=300)
    assert stopped.returncode == 3, stopped.stderr
    assert f"stopped after step 20 of 40 (--stop-at): --resume {tmp_path / 'b'}/latest.ckpt goes on" in stopped.stdout
    curve = tmp_path / "b/loss.csv"
    with open(curve, "a") as file:
        file.write("21,9.9,,6e-04,1.0,1.0,1\n2")
    resumed = subprocess.run([train_gpt, *common, "--resume", str(tmp_path / "b/latest.ckpt"), "--out", str(tmp_path / "b")],
                             capture_output=True, text=True, errors="replace", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    columns = lambda run: [line.split(",")[:3] for line in (tmp_path / run / "loss.csv").read_text().splitlines()]
    assert columns("b") == columns("a")
    scaling = lambda run: [line for line in run.stdout.splitlines() if line.startswith("fp16 loss scaling:")]
    assert scaling(resumed) == scaling(straight)
    assert not (tmp_path / "b/latest.ckpt").exists()


BENCH_LINE = re.compile(r"generation bench: batch (\d+), 80 new tokens per sequence: KV cache (\d+) tok/s "
                        r"\([\d.]+ s, ([a-z A-Z]+)\), no cache (\d+) tok/s \([\d.]+ s\): [\d.]+x; the same "
                        r"tokens both ways for (\d+) of 80 steps")


@pytest.mark.parametrize("graphs", [[], ["--no-cuda-graph"]], ids=["cuda-graph", "no-cuda-graph"])
def test_generation_bench_prints_a_line_per_batch(train_gpt, byte_data, graphs):
    """--generate-bench on the untrained tiny model, 80 tokens: past its context of 64, so the
    cached way fills its cache again at every token from the 64th; a line for batch 1 and one for
    batch 16, each with both rates, how the cached way's steps ran (each a CUDA graph, which the
    default dtype's reference allows, or with --no-cuda-graph their kernels one by one) and the
    steps drawn alike."""
    result = subprocess.run([train_gpt, "--data", str(byte_data), "-m", "tiny", "--generate-bench", "80",
                             *graphs], capture_output=True, text=True, errors="replace", timeout=300)
    if "no CUDA GPU" in result.stderr:
        pytest.skip("no CUDA GPU")
    assert result.returncode == 0, result.stderr
    found = [BENCH_LINE.search(line) for line in result.stdout.splitlines()]
    found = [match for match in found if match]
    assert [int(match[1]) for match in found] == [1, 16], result.stdout
    assert all(int(match[2]) > 0 and int(match[4]) > 0 for match in found)
    how = "kernels launched one by one" if graphs else "each step a CUDA graph"
    assert all(match[3] == how for match in found), result.stdout
    print(result.stdout)


def test_generate_draws_the_same_text_with_the_cache_and_without(train_gpt, byte_data, tmp_path):
    """A tiny model trained 30 steps in fp32, then 3 sequences of 80 bytes (past the context of
    64) from its checkpoint, with the KV cache and without, the same seed: the same text, where a
    draw does not lie within the two ways' rounding of a boundary of the probabilities (their logits
    differ by some 1e-6 in fp32: trainer/README.md, "Generation with a KV cache"; the model tests,
    Generation.*, hold every parting draw to that). So here every sequence must agree on its first
    16 bytes (another seed or order of the uniforms would part them at once), and the lengths they
    agree on are printed."""
    common = ["--data", str(byte_data), "-m", "tiny", "--dtype", "fp32"]
    trained = subprocess.run([train_gpt, *common, "-b", "4", "--steps", "30", "--val-every", "0",
                              "--sample-length", "0", "--out", str(tmp_path)],
                             capture_output=True, text=True, errors="replace", timeout=300)
    if "no CUDA GPU" in trained.stderr:
        pytest.skip("no CUDA GPU")
    assert trained.returncode == 0, trained.stderr
    generate = [train_gpt, *common, "--generate", "--resume", str(tmp_path / "model.ckpt"),
                "--generate-batch", "3", "--sample-length", "80", "--top-p", "0.9"]
    runs = [subprocess.run(generate + extra, capture_output=True, text=True, errors="surrogateescape",
                           timeout=300) for extra in ([], ["--no-kv-cache"])]
    for run in runs:
        assert run.returncode == 0, run.stderr
    cached, uncached = (run.stdout.split("--- sequence ")[1:] for run in runs)
    assert len(cached) == len(uncached) == 3
    agree = [next((i for i, (x, y) in enumerate(zip(c, u)) if x != y), len(c))
             for c, u in zip(cached, uncached)]
    print(f"the three sequences agree on {agree} characters of {[len(c) for c in cached]}")
    assert all(same >= len("1 of 3 ---\n") + 16 for same in agree)


QUANTIZED_ROW = re.compile(r"^(bf16|fp16|w8a16|w4a16) +([\d.]+) +([+-][\d.]+)? +([\d.]+) MiB  \((.*)\)$")


def test_quantized_table_of_a_briefly_trained_small(train_gpt, byte_data, tmp_path):
    """`small` (C = 384: three groups of 128) trained 200 steps, then --quantize w8a16,w4a16: a row
    per format with its validation loss and difference, the linear weights' memory (6 layers of 12
    C^2: 20.25 MiB in 16 bits, 10.20 with INT8 and a scale per row, 5.38 with INT4 and a scale per
    128); W8A16 within issue 32's 0.01 of bf16. The W4A16 difference is printed, not held to the
    issue's 0.05: that target is the 1000-step GPT-2 124M's (dev/accept_quantize.sh)."""
    trained = subprocess.run([train_gpt, "--data", str(byte_data), "-m", "small", "-b", "8", "--steps", "200",
                              "--val-every", "0", "--sample-length", "0", "--out", str(tmp_path)],
                             capture_output=True, text=True, errors="replace", timeout=600)
    if "no CUDA GPU" in trained.stderr:
        pytest.skip("no CUDA GPU")
    assert trained.returncode == 0, trained.stderr
    result = subprocess.run([train_gpt, "--data", str(byte_data), "--quantize", "w8a16,w4a16", "--resume",
                             str(tmp_path / "model.ckpt"), "--val-batches", "8"],
                            capture_output=True, text=True, errors="replace", timeout=300)
    assert result.returncode == 0, result.stderr
    print(result.stdout)
    rows = {m[1]: m for m in map(QUANTIZED_ROW.match, result.stdout.splitlines()) if m}
    # The first row: the checkpoint's weights in the activations' type (fp16 before compute
    # capability 8.0).
    assert list(rows)[1:] == ["w8a16", "w4a16"] and list(rows)[0] in ("bf16", "fp16"), result.stdout
    assert [rows[f][4] for f in rows] == ["20.25", "10.20", "5.38"]
    unquantized, w8, w4 = (float(rows[f][2]) for f in rows)
    assert abs(float(rows["w8a16"][3]) - (w8 - unquantized)) < 2e-4
    assert abs(float(rows["w4a16"][3]) - (w4 - unquantized)) < 2e-4
    assert abs(w8 - unquantized) < 0.01, result.stdout
    assert np.isfinite(w4), result.stdout
