"""A real PostgreSQL for the tests: Debian's `postgresql` package, one server per session.

`initdb` into a temporary directory, `pg_ctl` on a free loopback port (no Unix socket), a
password-protected superuser (scram-sha-256, so URLs carry a real password), stopped at
the end of the session. Each test gets a database of its own (`Postgres.database()`).

initdb refuses to run as root. As root (how `make test` installs the package) the server
runs as the package's own unprivileged `postgres` user via `runuser`; otherwise as
whoever runs the tests. Without the binaries the tests are skipped with the one-line
summary (`tests.needs`), and fail under CI=true.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.needs import program
from tests.sidecar.helpers import free_port

PASSWORD = "s3cret-fleet"
USER = "attest"


def _bin_dir() -> Path:
    """Debian keeps initdb and pg_ctl out of PATH, under /usr/lib/postgresql/VERSION/bin."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    return Path(program("pg_ctl", "postgresql")).parent


@dataclass
class Postgres:
    root: Path
    bin: Path
    port: int
    as_user: list[str] = field(default_factory=list)
    _count: int = 0

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.as_user, *args], capture_output=True, text=True, check=check, timeout=60, cwd="/"
        )

    def init(self) -> None:
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        self._chown(pwfile)
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            USER,
            "--pwfile",
            str(pwfile),
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                "unix_socket_directories = ''\nfsync = off\n"
                "synchronous_commit = off\nfull_page_writes = off\n"
                "max_connections = 200\nshared_buffers = 256MB\n"
            )

    def _chown(self, path: Path) -> None:
        if self.as_user:
            shutil.chown(path, "postgres", "postgres")

    def start(self) -> None:
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "30",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop", check=False
        )

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{db}"

    def database(self) -> str:
        """A new, empty database; its URL."""
        import psycopg

        self._count += 1
        name = f"t{os.getpid()}_{self._count}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


def start_postgres() -> Postgres:
    bin_dir = _bin_dir()
    root = Path(tempfile.mkdtemp(prefix="attest-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            program("runuser", "util-linux")
        as_user = [str(runuser), "-u", "postgres", "--"]
        shutil.chown(root, "postgres", "postgres")
    pg = Postgres(root, bin_dir, free_port(), as_user)
    pg.init()
    pg.start()
    deadline = time.monotonic() + 10
    import psycopg

    while True:
        try:
            psycopg.connect(pg.url(), connect_timeout=2).close()
            return pg
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def stop_postgres(pg: Postgres) -> None:
    pg.stop("immediate")
    shutil.rmtree(pg.root, ignore_errors=True)
