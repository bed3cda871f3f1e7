"""What each part of genai-routing.yaml costs the Collector, in one run.

    .venv/bin/python bench/bench_routing_variants.py [--rounds N]

The mixed load of `bench/bench_pipeline.py` (10 % GenAI) through the Collector alone and
through `collector-config/genai-routing.yaml` as shipped and with one part of its conditions
taken out at a time (the routing-key lookups, the span-name matches, the scope test), the
sidecar running as in that bench. Printed: spans/s end to end and the Collector's CPU per
span of the load, the figure that says what routing costs plain traffic; medians over the
rounds, the configurations interleaved. docs/genai-routing.md has the results.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_pipeline as pipeline  # noqa: E402
from sidecar_workload import build_requests  # noqa: E402

Config = dict[str, Any]


def _conditions(config: Config, name: str) -> list[str]:
    conditions: list[str] = config["processors"][f"filter/traces_{name}"]["trace_conditions"]
    return conditions


def _without_keys(config: Config) -> None:
    items = _conditions(config, "genai_items")
    items[1] = items[1].split(" or (span.attributes")[0] + ")"
    del _conditions(config, "plain")[3]


def _without_names(config: Config) -> None:
    items = _conditions(config, "genai_items")
    items[1] = "not (" + items[1][items[1].index("(span.attributes") :]
    del _conditions(config, "plain")[1:3]


def _without_scope(config: Config) -> None:
    del _conditions(config, "genai_items")[0]
    del _conditions(config, "plain")[0]


VARIANTS: dict[str, Callable[[Config], None]] = {
    "shipped": lambda config: None,
    "without-keys": _without_keys,
    "without-names": _without_names,
    "without-scope": _without_scope,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    shipped = yaml.safe_load((pipeline.COLLECTOR_CONFIG / "genai-routing.yaml").read_text())
    build = pipeline._collector_config
    results: dict[str, list[pipeline.Rate]] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        variant_dir = tmp / "variant"
        variant_dir.mkdir()

        def with_variant(
            kind: str,
            backend: str,
            sidecar: str,
            ports: dict[str, int],
            batch_timeout: str | None = None,
        ) -> str:
            rest = (backend, sidecar, ports, batch_timeout)
            if not kind.startswith("routing-"):
                return build(kind, *rest)
            config = copy.deepcopy(shipped)
            VARIANTS[kind.removeprefix("routing-")](config)
            (variant_dir / "genai-routing.yaml").write_text(yaml.safe_dump(config))
            saved, pipeline.COLLECTOR_CONFIG = pipeline.COLLECTOR_CONFIG, variant_dir
            try:
                return build("routing", *rest)
            finally:
                pipeline.COLLECTOR_CONFIG = saved

        pipeline._collector_config = with_variant
        mixed = build_requests(200, 24, 0.1, seed=2)
        for _ in range(args.rounds):
            for kind in ["collector", *(f"routing-{name}" for name in VARIANTS)]:
                rate = pipeline.throughput(kind, mixed, tmp, False)
                results.setdefault(kind, []).append(rate)
                print(
                    f"{kind:24s} {rate.per_s:9,.0f} spans/s  Collector {rate.collector_us:5.1f} "
                    f"us/span  sidecar {rate.sidecar_us:5.1f} us/span",
                    flush=True,
                )
    print("medians:")
    for kind, rates in results.items():
        print(
            f"{kind:24s} {statistics.median(r.per_s for r in rates):9,.0f} spans/s  Collector "
            f"{statistics.median(r.collector_us for r in rates):5.1f} us/span"
        )


if __name__ == "__main__":
    main()
