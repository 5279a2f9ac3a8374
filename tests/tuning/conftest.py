"""A throw-away PostgreSQL server for the tuning tests that share a study through a database server.

The server runs from the installed binaries (Debian's ``/usr/lib/postgresql/*/bin``, or ``initdb`` and
``pg_ctl`` on PATH) in a temporary folder, listening on 127.0.0.1 only, with trust authentication; it
is started once per test session, on first use, and always stopped at its end. ``make test`` installs
Debian's ``postgresql`` when it is missing (``make postgres``, as root with apt-get); a test session run
some other way installs it the same way. Only where the binaries are absent and cannot be installed
does the one test that needs the server skip, saying why.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PG_USER = "attnkit"  # the server's superuser (trust authentication on loopback)


def _find_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl: the newest /usr/lib/postgresql/N/bin, else PATH's."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb and (Path(initdb).resolve().parent / "pg_ctl").is_file():
        return Path(initdb).resolve().parent
    return None


def _install_or_reason() -> str | None:
    """Install Debian's PostgreSQL (``make postgres``) where it can be; otherwise say why the server is missing."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        why = "not running as root" if os.geteuid() != 0 else "no apt-get on this machine"
        return (
            "no PostgreSQL server binaries (initdb, pg_ctl) in /usr/lib/postgresql/*/bin or on PATH, and they "
            f"cannot be installed here ({why}); install Debian's postgresql (apt-get install postgresql) to run it"
        )
    if shutil.which("make") is None:
        return "no PostgreSQL server binaries, and no make to run `make postgres` (apt-get install postgresql)"
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), "postgres"], capture_output=True, text=True)
    if proc.returncode != 0 or _find_binaries() is None:
        return f"installing PostgreSQL with `make postgres` failed: {(proc.stdout + proc.stderr).strip()[-500:]}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    bindir: Path
    folder: Path
    port: int
    as_user: list[str]  # prefix that runs a command as the cluster's owner (runuser when we are root)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; returns its ``postgresql://`` URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user=PG_USER, dbname="postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def pg_ctl(self, *args: str) -> subprocess.CompletedProcess:
        cmd = [*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.folder / "data"), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _owner() -> tuple[list[str], int | None, int | None]:
    """initdb refuses to run as root: as root, run the cluster as Debian's ``postgres`` user (created by
    its package; created here if absent)."""
    if os.geteuid() != 0:
        return [], None, None
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
        user = pwd.getpwnam("postgres")
    return ["runuser", "-u", "postgres", "--"], user.pw_uid, user.pw_gid


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bindir = _find_binaries()
    if bindir is None:
        reason = _install_or_reason()
        bindir = _find_binaries()
        if bindir is None:
            pytest.skip(reason or "no PostgreSQL server binaries")
    as_user, uid, gid = _owner()
    folder = Path(tempfile.mkdtemp(prefix="attnkit-pg-"))
    if uid is not None:
        os.chown(folder, uid, gid)
    server = PostgresServer(bindir, folder, 0, as_user)
    init = subprocess.run(
        [*as_user, str(bindir / "initdb"), "-D", str(folder / "data"), "-U", PG_USER, "--auth=trust", "-E", "UTF8",
         "--no-sync"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if init.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.fail(f"initdb failed:\n{init.stdout}\n{init.stderr}")
    started = None
    try:
        for _ in range(3):  # another process may take the free port before the server binds it
            server.port = _free_port()
            options = f"-k {folder} -h 127.0.0.1 -p {server.port} -c fsync=off -c max_connections=200"
            started = server.pg_ctl("-o", options, "-l", str(folder / "server.log"), "-w", "-t", "60", "start")
            if started.returncode == 0:
                break
        if started is None or started.returncode != 0:
            log = (folder / "server.log").read_text() if (folder / "server.log").is_file() else ""
            pytest.fail(f"PostgreSQL did not start:\n{started and started.stderr}\n{log[-2000:]}")
        yield server
    finally:
        server.pg_ctl("-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)
