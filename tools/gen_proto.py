"""Generate attest_otel/_proto from proto/ with grpc_tools (for the build hook and `make proto`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path


def generate(root: Path) -> None:
    import grpc_tools
    from grpc_tools import protoc

    proto_root = root / "proto"
    out = root / "attest_otel" / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(str(p.relative_to(proto_root)) for p in proto_root.rglob("*.proto"))
    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{proto_root}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *files,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {files}")
    for d in [out, *[p for p in out.rglob("*") if p.is_dir()]]:
        (d / "__init__.py").touch()
    _rehome_imports(out, {Path(f).parts[0] for f in files})


def _rehome_imports(out: Path, roots: set[str]) -> None:
    """Point the generated cross-file imports at where the modules really are.

    protoc writes `from attest_otel.v1 import result_pb2` (the .proto package path), which
    names no module once the output sits under `attest_otel._proto`. Every import of a
    generated module (a top-level package that came from proto/, never `google.*`) is
    rewritten with the output's package prefix; running this twice changes nothing.
    """
    prefix = ".".join(out.relative_to(out.parents[1]).parts)  # "attest_otel._proto"
    pattern = re.compile(
        r"^(\s*)(from|import) (" + "|".join(re.escape(r) for r in sorted(roots)) + r")(\.|\s)",
        re.MULTILINE,
    )
    for path in [*out.rglob("*.py"), *out.rglob("*.pyi")]:
        text = path.read_text(encoding="utf-8")
        fixed = pattern.sub(lambda m: f"{m[1]}{m[2]} {prefix}.{m[3]}{m[4]}", text)
        if fixed != text:
            path.write_text(fixed, encoding="utf-8")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
