"""Build hook: generate the result schema's Python classes from proto/ at build time.

Generated code is never committed or edited by hand; `make proto` runs the same step.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

sys.path.insert(0, str(Path(__file__).parent))
from tools.gen_proto import generate


class ProtoBuildHook(BuildHookInterface):  # type: ignore[misc]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        generate(Path(self.root))
        build_data.setdefault("artifacts", []).append("attest_otel/_proto/**")
