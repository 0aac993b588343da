"""python3 -m course_torch {build, check, train, bench}: see the package's docstring."""
import argparse
import importlib.util
import os
import sys
from pathlib import Path

from course_torch import ROOT
from course_torch.plan import VARIANTS, make_plan, missing_files
from grader.course import load_course
from grader.results import BUILD_ERROR, FAIL, SKIPPED, TODO
from grader.torch_ops import INSTALL_TORCH, Report

def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m course_torch",
                                     description=__doc__.split(":")[0])
    parser.add_argument("what", choices=["build", "check", "train", "bench", "profile"])
    parser.add_argument("--variant", choices=VARIANTS, default=None,
                        help="whose kernels and binding: the learner's, the readable solutions', "
                             "or the fast references' (default: solution for check and build, "
                             "fast for train and bench)")
    parser.add_argument("--solutions-dir", type=Path, default=None,
                        help="the solutions' folder (default: solutions/; the planted bugs' runs "
                             "point it at their copy)")
    parser.add_argument("--build-dir", type=Path, default=None,
                        help="the extension's build folder (default: build/torch_ops/<variant>)")
    parser.add_argument("--report", type=Path, default=None, help="check: write its JSON here")
    parser.add_argument("--steps", type=int, default=300, help="train: steps of each run")
    parser.add_argument("--ops", default="layer_norm,linear,attention,gelu,cross_entropy",
                        help="train, profile: the model's ops to swap for the course's (the "
                             "others stay PyTorch's), comma-separated")
    parser.add_argument("--data", type=Path, default=ROOT / "data/shakespeare")
    parser.add_argument("--out", type=Path,
                        default=Path(os.environ.get("OUT", ROOT / "build/torch_ops")))
    parser.add_argument("--verbose", action="store_true", help="the compiler's commands")
    args = parser.parse_args()
    if args.variant is None:
        args.variant = "fast" if args.what in ("train", "bench", "profile") else "solution"
    if args.build_dir is None:
        args.build_dir = ROOT / "build" / "torch_ops" / args.variant
    return args


def prepare(args: argparse.Namespace):
    """Torch, a GPU, the plan, the built and registered extension: (plan, None), or (None, the
    report that ends here)."""
    if importlib.util.find_spec("torch") is None:
        return None, Report(SKIPPED, (f"PyTorch is not installed for {sys.executable}: "
                                      f"{INSTALL_TORCH}",))
    import torch

    if not torch.cuda.is_available():
        return None, Report(SKIPPED, ("no CUDA GPU visible to PyTorch (torch.cuda.is_available() "
                                      f"is False; PyTorch {torch.__version__}, built for CUDA "
                                      f"{torch.version.cuda})",))
    from course_torch import extension

    course = load_course(ROOT)
    plan = make_plan(course, args.variant, extension.gpu_sm(), args.solutions_dir)
    missing = missing_files(plan)
    if missing:
        return None, Report(BUILD_ERROR, tuple(f"missing: {course.relative(path)}"
                                               if path.is_relative_to(ROOT) else f"missing: {path}"
                                               for path in missing))
    print(f"building {plan.name} in {args.build_dir} (a first build takes minutes)", flush=True)
    try:
        extension.build(plan, args.build_dir, ROOT, args.verbose)
    except extension.BuildError as error:
        return None, Report(BUILD_ERROR, ("the extension does not build:", *error.lines))
    refused = extension.refusals(plan, args.build_dir, ROOT)
    if refused:
        return None, Report(BUILD_ERROR, tuple(refused))
    binding = course.relative(plan.binding_py) if plan.binding_py.is_relative_to(ROOT) else str(plan.binding_py)
    try:
        extension.register(plan)
    except Exception as error:  # the learner's file: whatever it raises is its report
        from course_torch.checks import classify

        problem = classify(binding, "loading it", error)
        return None, Report(problem.status if problem.status == TODO else FAIL, (problem.line,))
    for note in plan.notes:
        print(f"note: {note}")
    return plan, None


def main() -> int:
    args = arguments()
    plan, ended = prepare(args)
    if ended is not None:
        print(f"{ended.status}: " + "\n".join(ended.detail))
        if args.report:
            ended.write(args.report)
        return 0 if ended.status == SKIPPED and args.what == "check" else 1
    if args.what == "build":
        print(f"built and registered: torch.ops.course.* ({plan.variant}, sm_{plan.sm})")
        return 0
    if args.what == "check":
        from course_torch.checks import run_all

        status, lines = run_all(plan.sm, log=print)
        report = Report(status, tuple(lines))
        if args.report:
            report.write(args.report)
        print(f"08_training/torch_ops ({plan.variant}): {status}")
        return 0 if status == "pass" else 1
    if args.what == "train":
        from course_torch.model import train_both

        return 0 if train_both(args.data, args.steps, args.out, args.ops.split(",")) else 1
    if args.what == "profile":
        from course_torch.step_profile import profile_steps

        return 0 if profile_steps(args.data, args.ops.split(",")) else 1
    from course_torch.bench import bench

    return 0 if bench() else 1


if __name__ == "__main__":
    sys.exit(main())
