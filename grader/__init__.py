"""The course's grader: builds the exercises, runs their checkers and reports (see README.md)."""
