#!/usr/bin/env python3
"""The full checker output of planted bugs, one file each: for a planted bug whose row in `grader
check --mutants` shows the wrong message, to see what its checker printed (the table shows only
the line a learner reads first). On a GPU:

    OUT=dir python3 dev/mutant_output.py 07/attention_naive pv_reads_one_key_past_T [NAME]...

writes $OUT/<name>.txt (default build/mutant-output/) and prints the grader's table.
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from grader import cli, mutants  # noqa: E402

out = Path(os.environ.get("OUT", "build/mutant-output"))
out.mkdir(parents=True, exist_ok=True)
run_one, graded = mutants._run_one, mutants.grade
running = ""  # the planted bug being graded


def run_one_named(tree, sources, mutant, log):
    global running
    running = mutant.name
    return run_one(tree, sources, mutant, log)


def grade_and_keep(tree, exercises, log):
    """grader.mutants' grade, with the result's detail and full output written to $OUT."""
    results = graded(tree, exercises, log)
    for result in results:
        (out / f"{running}.txt").write_text(
            "== detail (what the learner is shown)\n" + "\n".join(result.outcome.detail) +
            "\n== full output\n" + result.outcome.output, encoding="utf-8")
    return results


if len(sys.argv) < 3:
    sys.exit(__doc__)
mutants._run_one, mutants.grade = run_one_named, grade_and_keep
selector, names = sys.argv[1], sys.argv[2:]
named = [arg for name in names for arg in ("--mutant", name)]
cli.main(["check", selector, "--no-build", "--mutants", *named])
