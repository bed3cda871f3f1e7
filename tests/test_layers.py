"""The layering rule of the package, checked: OTLP in, spans, runs, findings, OTLP out.

The contracts live in pyproject.toml ([tool.importlinter]): a module imports only from layers
below its own, and no package's modules import each other in a circle. A function-local
import counts like any other, so hiding an upward arrow inside a function does not pass.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_imports_follow_the_data_flow_and_have_no_cycles() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run(
        [str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
