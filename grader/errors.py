"""The one exception the grader shows to the user."""
import click


class UserError(click.ClickException):
    """A mistake or missing piece the user can fix: one line on stderr, exit status 2."""

    exit_code = 2
