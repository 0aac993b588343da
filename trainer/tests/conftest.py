"""Fixtures of the trainer's Python tests: train_gpt's path (CTest passes it) and a small
byte-level corpus made from the course's own docs with prepare_data.py."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def train_gpt():
    path = os.environ.get("TRAIN_GPT")
    if not path or not Path(path).is_file():
        pytest.skip("TRAIN_GPT is not set to a built train_gpt (ctest sets it)")
    return path


@pytest.fixture(scope="session")
def byte_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    texts = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "STATUS.md"]
    subprocess.run([sys.executable, str(ROOT / "trainer/prepare_data.py"), "--tokenizer", "byte",
                    "--out", str(out), "--text", *map(str, texts)], check=True, capture_output=True)
    return out
