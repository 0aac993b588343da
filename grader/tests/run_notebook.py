"""Runs notebooks/free_gpu.ipynb top to bottom and prints each code cell's output.

    python3 grader/tests/run_notebook.py notebooks/free_gpu.ipynb   (COURSE_DIR=... to skip the clone)

With nbclient (the `notebook` optional group) the cells run in a real Jupyter kernel, errors
included, and the executed notebook is written beside the original as *.executed.ipynb. Without
it the code cells run as one Python script (`!command` lines through the shell), which proves the
commands but not the notebook format. Exit status 1 if a cell failed. test_notebook.py uses it.
"""
import importlib.util
import subprocess
import sys
from pathlib import Path

import nbformat


def cell_outputs(cell) -> str:
    texts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            texts.append(f"{output.get('ename')}: {output.get('evalue')}")
        else:
            texts.append(output.get("text") or "".join(output.get("data", {}).get("text/plain",
                                                                                    "")))
    return "".join(texts)


def run_with_nbclient(notebook, folder: Path, timeout_s: int) -> bool:
    from nbclient import NotebookClient

    client = NotebookClient(notebook, timeout=timeout_s, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(folder)}})
    client.execute()
    failed = False
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        print(f">>> {cell.source.splitlines()[0]}")
        print(cell_outputs(cell).rstrip())
        failed |= any(output.get("output_type") == "error" for output in cell.get("outputs", []))
    return not failed


def as_script(notebook) -> str:
    """The code cells as one script: `!cmd` lines run through the shell, `{expr}` expanded."""
    lines = ["import subprocess as _subprocess, sys as _sys",
             "def _shell(command):",
             "    print('$', command, flush=True)",
             "    _subprocess.run(command, shell=True)"]
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        lines.append(f"print('>>> ' + {cell.source.splitlines()[0]!r}, flush=True)")
        for line in cell.source.splitlines():
            if line.lstrip().startswith("!"):
                indent = line[:len(line) - len(line.lstrip())]
                command = line.lstrip()[1:]
                lines.append(f"{indent}_shell(f{command!r})")
            else:
                lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> int:
    path = Path(sys.argv[1]).resolve()
    notebook = nbformat.read(path, as_version=4)
    if importlib.util.find_spec("nbclient") is None:
        print("nbclient is not installed: running the code cells as a script")
        return subprocess.run([sys.executable, "-c", as_script(notebook)],
                              cwd=path.parent).returncode
    ok = run_with_nbclient(notebook, path.parent, timeout_s=1800)
    nbformat.write(notebook, path.with_suffix(".executed.ipynb"))
    print("the notebook ran top to bottom" + ("" if ok else ", with errors in some cells"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
