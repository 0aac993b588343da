"""What the grader is doing, on stderr: plain lines, and on a terminal a spinner for the steps that
are quiet for a while (a configure, collecting the errors of the targets that did not build)."""
from contextlib import contextmanager
from typing import Callable, Iterator

import click
from rich.console import Console
from rich.markup import escape

Log = Callable[[str], None]
Step = Callable[[str], None]


class StderrLog:
    """The grader's log: `log(line)` prints a line; `log.activity(title)` shows a long step."""

    def __call__(self, line: str) -> None:
        # stdout carries only the table or the JSON.
        click.echo(line, err=True)

    @contextmanager
    def activity(self, title: str) -> Iterator[Step]:
        console = Console(stderr=True, highlight=False)
        if not console.is_terminal:
            self(title)
            yield _ignore
            return
        with console.status(escape(title)) as status:
            yield lambda step: status.update(f"{escape(title)}  [dim]{escape(step[:100])}")
        self(f"{title}: done")


@contextmanager
def activity(log: Log, title: str) -> Iterator[Step]:
    """`log.activity(title)` where the log has one, else the title as a line; the block may pass
    its latest step (a line of CMake's output) to the callable it gets."""
    show = getattr(log, "activity", None)
    if show is None:
        log(title)
        yield _ignore
        return
    with show(title) as step:
        yield step


def _ignore(step: str) -> None:
    pass
