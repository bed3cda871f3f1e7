"""Errors attest-otel raises on purpose, and the exit code each one means.

    AttestOtelError                 exit 2: the base; catch it to catch them all
    ├── UsageError                  exit 2: a flag or combination the command cannot honour
    │   └── ModelError              exit 2: a model check was asked for and no model can run it
    ├── InputError                  exit 2: a file (and line) we cannot read: run files, OTLP
    │   └── PolicyError             exit 2: a policy or config file, every problem listed
    ├── SourceError                 exit 2: a trace source (store, Jaeger, Tempo...) failed
    │   └── TraceNotFoundError      exit 2: the source answered and has no such trace
    ├── ExportError                 exit 4: telemetry could not be sent
    └── ListenError                 exit 5: an address to listen on is taken or not allowed

Every class is re-exported from `attest_otel`, so `except attest_otel.AttestOtelError`
needs no knowledge of the modules that raise. The CLI prints `str(error)` on one line and
exits with `error.exit_code`; nothing else should ever reach the user as a traceback. A
subclass that only steers code inside the package, and that no user needs to catch apart,
stays beside that code and is listed here (a test holds the list complete):
`ingest.gzip.InflatesTooFar`, an `InputError` that makes the sidecar's HTTP receiver answer
413 rather than 400.

A model that fails *during* grading raises nothing: the rules turn the failed call into
`recovery: unchecked` (see docs/rules.md), so one flaky model call cannot stop a batch.
`ModelError` is the case before any grading starts: the user asked for a model check
(`--appropriate`, `--check-answer`, `grader.tool_use(check_answer=True)`) and there is no
model to ask. It is a `UsageError` because the fix is the user's (set a key, or run inside
`llm.using`), and so that code catching `UsageError` for it keeps working.

Every exit code, in one place (the README's table repeats it, and a test holds them
equal): 0 every run passed; 1 a run failed, or a pass rate is below `--fail-under`; 2 usage
or input, including an input with nothing to grade and warnings under `--strict`; 3 internal
error (a bug: report it); 4 export failed; 5 cannot listen; 130 interrupted (Ctrl-C); 141
stdout was closed early (`grade ... | head`), as a shell reports a process killed by SIGINT
or SIGPIPE. Export and listening have codes of their own so that a CI gate can tell "the
agent failed" (1) from "the pipeline around it did" (4, 5).
"""

from __future__ import annotations

__all__ = [
    "EXIT_BROKEN_PIPE",
    "AttestOtelError",
    "ExportError",
    "InputError",
    "ListenError",
    "ModelError",
    "PolicyError",
    "SourceError",
    "TraceNotFoundError",
    "UsageError",
]

EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE, what a shell reports for a writer whose reader went away."""


class AttestOtelError(Exception):
    """Anything attest-otel raises on purpose; `exit_code` is what the CLI exits with."""

    exit_code = 2


class UsageError(AttestOtelError):
    """The command or call asks for something that cannot be done as asked."""


class ModelError(UsageError):
    """A model check was asked for, and no model is available to make it."""


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
    """Every problem of one policy or config file at once, so one edit fixes them all."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(source, "; ".join(problems))


class SourceError(AttestOtelError):
    """A trace source could not be read: down, refused, or answered with something else."""


class TraceNotFoundError(SourceError):
    """The backend answered, and it does not have the trace.

    A subclass so that a loop over many ids (`--since`) can skip one that has aged out of
    the backend while still stopping on a backend that is down.
    """

    def __init__(self, trace_id: str, where: str) -> None:
        self.trace_id = trace_id
        self.where = where
        super().__init__(f"trace ID {trace_id} not found in {where}")


class ExportError(AttestOtelError):
    """Grades were made (and printed) but could not be sent as telemetry."""

    exit_code = 4


class ListenError(AttestOtelError):
    """A receiver or /metrics address that cannot be bound (in use, not permitted)."""

    exit_code = 5
