#!/usr/bin/env python3
"""Runs a notebook's code cells in order without Jupyter (course authors: the GPU machine has no
Jupyter), and stops at the first cell that fails, naming it.

    COURSE_DIR=$PWD python3 dev/run_notebook.py notebooks/free_gpu.ipynb [--cells 1-8,10-] [--list]

--cells N,N-M,N-   the code cells to run, numbered from 1 in the notebook's order (markdown cells
                   are not counted); `--list` prints the numbers. Default: all of them.

Each cell's output comes under a header that names it (its number and the heading of the markdown
above it), followed by the seconds it took. Exit status 0 when every selected cell ran, 1 at the
first failure (the last line names the cell and the command or exception), 2 when the notebook
uses something this runner does not support (nothing runs then).

What it supports, a small subset of what IPython runs (test_notebook.py checks that the course's
notebook keeps to it):
- Python: every cell runs in one namespace (`__name__` is "__main__"), in the folder the command
  was started in, with the environment it was started with (so the notebook's own variables,
  such as COURSE_DIR, come from there).
- Shell lines: a line whose first non-blank character is `!` runs the rest through `/bin/sh -c`
  (IPython takes the user's $SHELL, Colab bash: keep to what POSIX sh runs), inside an `if` too,
  in the current folder and environment (os.chdir and os.environ of earlier cells count), its
  output streamed after a `$ command` line. `{expression}` is replaced by str() of the Python
  expression, evaluated where the line runs, as IPython does; `{{` and `}}` are literal braces.
  An expression that raises fails the cell (IPython would pass the line on unexpanded). A `$`
  that IPython would take from Python (`$` followed by a letter, digit, `_`, `.`, `{` or `$`) is
  refused; `$?` and `$(...)` go to the shell as they are.
- A shell line that exits with a status other than 0 fails its cell (IPython would go on): a line
  whose failure is expected says so itself (`cmd || echo ...`, `cmd || test $? -eq 1`).
- Refused before anything runs: magics (`%`, `%%`), `!!`, a shell line continued with a
  backslash, a shell line's output assigned (`x = !cmd`: not Python, so a syntax error).
- A line inside a multi-line string that starts with `!` is taken for a shell line: don't.
"""
import argparse
import builtins
import json
import linecache
import re
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

# The name the cells' shell lines call (a name no notebook would use).
SHELL = "_run_notebook_shell"
# `$` followed by what IPython expands from Python variables ($name, $1, $obj.attr, ${...}, $$).
IPYTHON_DOLLAR = re.compile(r"\$[\w.{$]")


class NotebookError(Exception):
    """The notebook uses what this runner does not support (exit status 2)."""


class ShellLineFailed(Exception):
    """A shell line whose {expression} raised, or whose command exited with a status but 0."""


@dataclass
class Cell:
    number: int  # among the code cells, from 1
    title: str   # the first heading of the markdown cell above it, else its first line
    source: str

    @property
    def filename(self) -> str:
        return f"<cell {self.number}>"


def read_cells(path: Path) -> list[Cell]:
    """The notebook's code cells, each with the title of the markdown above it."""
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        raw = notebook["cells"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise NotebookError(f"{path}: not a notebook ({error})") from None
    cells, heading = [], ""
    for cell in raw:
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        if cell.get("cell_type") == "markdown":
            headings = [line.lstrip("#").strip() for line in source.splitlines()
                        if line.startswith("#")]
            heading = headings[0] if headings else heading
        elif cell.get("cell_type") == "code":
            first = next((line for line in source.splitlines() if line.strip()), "")
            cells.append(Cell(len(cells) + 1, heading or first, source))
    return cells


def split_fields(command: str) -> list[tuple[str, bool]]:
    """A shell line as (text, is_expression) pieces: `{expr}` fields and literal text, `{{` and
    `}}` unescaped. Raises NotebookError for what IPython and this runner would read differently."""
    if found := IPYTHON_DOLLAR.search(command):
        raise NotebookError(f"`{found[0]}` (IPython expands it from Python variables): write "
                            "{expression} for a Python value, or set the shell's variable in "
                            "the line itself")
    pieces, text, i = [], "", 0
    while i < len(command):
        pair = command[i:i + 2]
        if pair in ("{{", "}}"):
            text, i = text + pair[0], i + 2
        elif command[i] == "{":
            end = command.find("}", i + 1)
            expression = command[i + 1:end].strip() if end > 0 else ""
            if end < 0 or not expression or "{" in expression:
                raise NotebookError(f"an unclosed or empty {{expression}} in `{command}` ({{{{ "
                                    "and }} are literal braces)")
            pieces += [(text, False), (expression, True)]
            text, i = "", end + 1
        elif command[i] == "}":
            raise NotebookError(f"a lone }} in `{command}` (}} is written }}}})")
        else:
            text, i = text + command[i], i + 1
    return [*pieces, (text, False)]


def expand(command: str, global_names: dict, local_names: dict) -> str:
    """The shell line with each {expression} replaced by str() of its value."""
    return "".join(str(eval(piece, global_names, local_names)) if is_expression else piece
                   for piece, is_expression in split_fields(command))


def to_python(cell: Cell) -> str:
    """The cell as Python, line for line (tracebacks keep the cell's line numbers): each shell
    line a call of SHELL with its text. Raises NotebookError for what is not supported."""
    lines = []
    for number, line in enumerate(cell.source.splitlines(), 1):
        stripped = line.lstrip()
        where = f"cell {cell.number}, line {number}"
        if stripped.startswith("%"):
            raise NotebookError(f"{where}: IPython magics are not supported: {stripped}")
        if stripped.startswith("!") and not stripped.startswith("!="):  # `!=`: a continued line
            command = stripped[1:].strip()
            if stripped.startswith("!!") or not command or command.endswith("\\"):
                raise NotebookError(f"{where}: a shell line is `!command` on one line: {stripped}")
            try:
                split_fields(command)
            except NotebookError as error:
                raise NotebookError(f"{where}: {error}") from None
            line = f"{line[:len(line) - len(stripped)]}{SHELL}({command!r})"
        lines.append(line)
    return "\n".join(lines) + "\n"


def compile_cell(cell: Cell):
    try:
        return compile(to_python(cell), cell.filename, "exec")
    except SyntaxError as error:
        raise NotebookError(f"cell {cell.number}, line {error.lineno}: {error.msg} (IPython "
                            "syntax other than `!command` lines is not supported)") from None


def run_shell(command: str) -> None:
    """A cell's shell line: expanded in its caller's names, run by /bin/sh, a failure raised."""
    caller = sys._getframe(1)
    try:
        expanded = expand(command, caller.f_globals, caller.f_locals)
    except Exception as error:
        raise ShellLineFailed(f"`{command}`: {type(error).__name__}: {error}") from None
    print(f"$ {expanded}", flush=True)
    sys.stderr.flush()
    status = subprocess.run(expanded, shell=True, stdin=subprocess.DEVNULL).returncode
    if status > 0:
        raise ShellLineFailed(f"`{expanded}` exited with status {status}")
    if status < 0:
        raise ShellLineFailed(f"`{expanded}` was killed by signal {-status}")


def select(cells: list[Cell], spec: str | None) -> list[Cell]:
    """The cells `spec` names ("1-8,10,12-"), in the notebook's order."""
    if spec is None:
        return cells
    wanted = set()
    for part in spec.split(","):
        found = re.fullmatch(r"\s*(\d+)\s*(?:(-)\s*(\d*)\s*)?", part)
        if not found:
            raise NotebookError(f"--cells {spec}: write numbers and ranges, e.g. 1-8,10,12-")
        first = int(found[1])
        last = first if not found[2] else int(found[3]) if found[3] else len(cells)
        if not 1 <= first <= last <= len(cells):
            raise NotebookError(f"--cells {spec}: the notebook has code cells 1 to {len(cells)}")
        wanted.update(range(first, last + 1))
    return [cell for cell in cells if cell.number in wanted]


def run(cells: list[Cell], selected: list[Cell]) -> bool:
    """Runs the selected cells in one namespace; False at the first failure, after naming it."""
    code = {cell.number: compile_cell(cell) for cell in cells}  # all parsed before anything runs
    names = {"__name__": "__main__", "__builtins__": builtins, SHELL: run_shell}
    started = time.monotonic()
    for cell in selected:
        # Tracebacks show the cell's own lines.
        linecache.cache[cell.filename] = (len(cell.source), None,
                                          cell.source.splitlines(True), cell.filename)
        print(f"\n=== cell {cell.number}/{len(cells)}: {cell.title}", flush=True)
        cell_started = time.monotonic()
        try:
            exec(code[cell.number], names)
        except ShellLineFailed as failure:
            problem = str(failure)
        except Exception as error:  # a cell's exception (SystemExit too): the cell failed
            sys.stdout.flush()
            traceback.print_exception(type(error), error, error.__traceback__.tb_next)
            problem = "".join(traceback.format_exception_only(type(error), error)).strip()
        except SystemExit as exit_:
            problem = f"SystemExit({exit_.code})"
        else:
            sys.stdout.flush()
            print(f"--- cell {cell.number} done in {time.monotonic() - cell_started:.1f} s",
                  flush=True)
            continue
        sys.stdout.flush()
        print(f"run_notebook: cell {cell.number} ({cell.title}) failed: {problem}",
              file=sys.stderr, flush=True)
        return False
    print(f"\nrun_notebook: {len(selected)} cells ran in {time.monotonic() - started:.0f} s")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--cells", metavar="N,N-M,N-",
                        help="the code cells to run, from 1 (default: all)")
    parser.add_argument("--list", action="store_true",
                        help="print the code cells' numbers and titles, and run nothing")
    args = parser.parse_args(argv)
    try:
        cells = read_cells(args.notebook)
        if args.list:
            for cell in cells:
                print(f"cell {cell.number}: {cell.title}")
            return 0
        return 0 if run(cells, select(cells, args.cells)) else 1
    except NotebookError as error:
        print(f"run_notebook: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
