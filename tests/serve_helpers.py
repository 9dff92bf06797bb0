"""Helpers of the serve tests: sample chat logs and a real `osumem serve` process on a
free loopback port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

#: Runs the `osumem` command of this checkout.
OSUMEM = [sys.executable, "-c", "from osumem.cli import main; main()"]
TOKEN = "test-token-all-namespaces-0123456789"
TEAM_TOKEN = "test-token-team-only-abcdefghijkl"


def turn(k: int) -> list[dict[str, Any]]:
    """One agent turn: a user request, a tool call and its result."""
    return [
        {"role": "user", "content": f"turn {k}: check reservation R{k} for passenger P{k % 7}"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"c{k}",
                    "type": "function",
                    "function": {
                        "name": "get_reservation",
                        "arguments": json.dumps({"reservation_id": f"R{k}"}),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": f"c{k}",
            "content": f"R{k}: flight HAT{k:03d}, paid with {'card' if k % 2 else 'voucher'}",
        },
    ]


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound and released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_env() -> dict[str, str]:
    """The environment of a server subprocess: this checkout's sources first."""
    src = str(Path(__file__).resolve().parents[1] / "src")
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": src + (os.pathsep + path if path else "")}


class Server:
    """`osumem serve --transport http` in a subprocess."""

    def __init__(self, store: Path, token_file: Path | None, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [
            *OSUMEM, "serve", "--store", str(store),
            "--transport", "http", "--port", str(self.port), "--encoder", "hashing:d64",
        ]  # fmt: skip
        if token_file is not None:
            args += ["--token-file", str(token_file)]
        env = serve_env()
        env.pop("OSUMEM_TOKEN", None)
        self.proc = subprocess.Popen(
            [*args, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read()}")  # type: ignore[union-attr]
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not start within 120 s")

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)


def write_tokens(path: Path) -> Path:
    """A token file: one token for everything, one limited to ``team-*``."""
    path.write_text(f"# tokens\n{TOKEN}\n{TEAM_TOKEN} team-*\n")
    return path
