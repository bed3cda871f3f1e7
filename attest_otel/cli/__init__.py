"""The `attest-otel` command: thin click wrappers over the pipeline, the sources and exports.

Every error a user can cause ends here as one line on stderr and an exit code (the README's
table: 1 a run failed, 2 usage or input, 4 could not export, 5 cannot listen, ...).

Imports of the stages happen inside the commands that need them, on purpose: the pipeline
and the sidecar pull in protobuf, grpc, the OTel SDK and every dialect (0.35-0.65 s here),
while `attest-otel --help` and `tools` take 0.2-0.3 s without them. The layering contract
(pyproject.toml, tests/test_layers.py) counts these imports like any other.
"""

from __future__ import annotations

import os
from typing import Any

import click

from attest_otel.cli.attest import run, tools
from attest_otel.cli.common import broken_pipe, fail
from attest_otel.cli.grade import grade
from attest_otel.cli.inspect import inspect
from attest_otel.cli.report import report
from attest_otel.cli.serve import serve
from attest_otel.errors import AttestOtelError


def _usage_error(e: click.UsageError) -> None:
    """click's three lines (usage, hint, error) as one, with where to read more."""
    path = e.ctx.command_path if e.ctx is not None else "attest-otel"
    fail(f"{e.format_message()} (see '{path} --help')", e.exit_code)


class _Group(click.Group):
    """Turns our own errors into one line and an exit code, whatever command raised them."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:  # the group's own options
            _usage_error(e)
            raise  # not reached: fail exits

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as e:  # a command's options, or no such command
            _usage_error(e)
        except AttestOtelError as e:
            fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except BrokenPipeError:
            broken_pipe()
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as e:
            if os.environ.get("ATTEST_OTEL_DEBUG"):
                raise
            fail(
                f"internal error: {type(e).__name__}: {e} (set ATTEST_OTEL_DEBUG=1 for details)", 3
            )


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="attest-otel")
def main() -> None:
    """Grade AI-agent tool use, from attest run files or OpenTelemetry traces."""


for _command in (tools, run, grade, inspect, report, serve):
    main.add_command(_command)

if __name__ == "__main__":  # pragma: no cover
    main()
