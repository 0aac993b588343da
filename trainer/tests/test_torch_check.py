"""The PyTorch agreement check (trainer/torch_check.py) on the tiny model: skipped without
PyTorch or a GPU, so CI skips it; on a GPU machine it is the step-0 and 20-step comparison."""
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parents[1] / "torch_check.py"


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_agrees_with_pytorch(train_gpt, byte_data, tmp_path, dtype):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    if dtype == "bf16" and torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("bf16 needs compute capability 8.0 or newer")
    result = subprocess.run([sys.executable, str(SCRIPT), "agree", "--train-gpt", train_gpt,
                             "--data", str(byte_data), "--model", "tiny", "--dtype", dtype,
                             "-b", "4", "-t", "64", "--steps", "20", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
