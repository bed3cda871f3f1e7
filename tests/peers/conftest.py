"""The sidecar tests' next hop (a gRPC server keeping what it gets) for the peers' tests too."""

from tests.sidecar.conftest import downstream

__all__ = ["downstream"]
