"""Generate attest_otel/_proto from proto/ with grpc_tools (used by the build hook and `make proto`)."""

from __future__ import annotations

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
    args = ["protoc", f"-I{proto_root}", f"-I{include}", f"--python_out={out}",
            f"--pyi_out={out}", f"--grpc_python_out={out}", *files]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {files}")
    # Generated modules import each other as `attest_otel.v1...`; make that package importable
    # under attest_otel._proto by putting the output directory on the package path.
    for d in [out, *[p for p in out.rglob("*") if p.is_dir()]]:
        (d / "__init__.py").touch()


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
