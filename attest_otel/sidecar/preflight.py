"""Checks at start that warn rather than refuse: things that may be fixed after we start.

A next hop that does not resolve or does not listen yet is common while a stack comes up
(the Collector starts after the sidecar), so it is no reason to exit; but saying nothing
until shutdown, as before, left a new user with spans queueing for no visible reason
(issue 27). One WARNING naming the host says it at once.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

__all__ = ["forward_problem"]

_DEFAULT_PORT = {"grpc": 4317, "http/protobuf": 4318}


def forward_problem(endpoint: str, protocol: str, timeout_s: float = 1.0) -> str | None:
    """Why the next hop cannot be reached right now, or None when a connection opens."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    host = parts.hostname
    if not host:
        return f"forward endpoint {endpoint!r} names no host"
    try:
        port = parts.port or (443 if parts.scheme == "https" else _DEFAULT_PORT.get(protocol, 80))
    except ValueError:
        return f"forward endpoint {endpoint!r} has no valid port"
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        return (
            f"forward host {host!r} does not resolve ({reason}): spans queue until it does; "
            "check forward.endpoint"
        )
    family, kind, proto, _, address = addresses[0]
    with socket.socket(family, kind, proto) as s:
        s.settimeout(timeout_s)
        try:
            s.connect(address)
        except OSError as e:
            reason = e.strerror or type(e).__name__
            return (
                f"nothing answers at the forward endpoint {host}:{port} yet ({reason}): "
                "spans queue until it does"
            )
    return None
