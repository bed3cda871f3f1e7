"""Errors attest-otel raises on purpose, and the exit code each one means.

    AttestOtelError                 exit 2 unless a subclass says otherwise
    ├── UsageError                  a flag or combination the command cannot honour
    ├── InputError                  a file (and line) we cannot read: run files, OTLP, policy
    │   └── PolicyError             a policy or config file with every problem listed
    ├── SourceError                 a trace source (store, Jaeger, Tempo...) failed or lacks the id
    ├── ModelError                  a model call failed; the grader turns it into `unchecked`
    └── ExportError                 telemetry could not be sent (exit 1)

The CLI prints `str(error)` on one line and exits with `error.exit_code`; nothing else
should ever reach the user as a traceback.
"""

from __future__ import annotations


class AttestOtelError(Exception):
    exit_code = 2


class UsageError(AttestOtelError):
    pass


class InputError(AttestOtelError):
    """Names where the bad input is, so the user can open the file at the line."""

    def __init__(self, source: str, problem: str, *, line: int | None = None) -> None:
        if "\n" in problem or "\r" in problem:  # one line, whatever the input put in it
            problem = problem.replace("\r", "\\r").replace("\n", "\\n")
        self.source = source
        self.line = line
        self.problem = problem
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {problem}")


class PolicyError(InputError):
    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(source, "; ".join(problems))


class SourceError(AttestOtelError):
    pass


class ModelError(AttestOtelError):
    pass


class ExportError(AttestOtelError):
    exit_code = 1
