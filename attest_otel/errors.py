"""Errors attest-otel raises on purpose, and the exit code each one means.

    AttestOtelError                 exit 2 unless a subclass says otherwise
    ├── UsageError                  a flag or combination the command cannot honour
    ├── InputError                  a file (and line) we cannot read: run files, OTLP, policy
    │   └── PolicyError             a policy or config file with every problem listed
    ├── SourceError                 a trace source (store, Jaeger, Tempo...) failed or lacks the id
    ├── ModelError                  a model call failed; the grader turns it into `unchecked`
    ├── ExportError                 telemetry could not be sent (exit 4)
    └── ListenError                 an address to listen on is taken or not allowed (exit 5)

The CLI prints `str(error)` on one line and exits with `error.exit_code`; nothing else
should ever reach the user as a traceback. Every exit code, in one place (the README's
table repeats it): 0 every run passed; 1 a run failed, or a pass rate is below
`--fail-under`; 2 usage or input, including an input with nothing to grade and warnings
under `--strict`; 3 internal error (a bug: report it); 4 export failed; 5 cannot listen;
141 stdout was closed early (`grade ... | head`), as a shell reports a writer killed by
SIGPIPE. Export and listening have codes of their own so that a CI gate can tell "the
agent failed" (1) from "the pipeline around it did" (4, 5).
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


EXIT_BROKEN_PIPE = 141


class ExportError(AttestOtelError):
    exit_code = 4


class ListenError(AttestOtelError):
    """A receiver or /metrics address that cannot be bound (in use, not permitted)."""

    exit_code = 5
