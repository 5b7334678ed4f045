"""Shared fixtures for the Python side of the interop suite.

Every test here drives a real component: `envtrain serve` started as a child process on a loopback port, the real
openenv / transformers / trl packages from the project's .venv. A skipped test fails the run (scripts/test-summary.mjs).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TSX = ROOT / "node_modules" / ".bin" / "tsx"
# The packages run from their TypeScript sources in the repository: every node process this suite starts resolves
# `@envtrain/<pkg>` to src/ through the "@envtrain/source" export condition (npm scripts get it from .npmrc).
if "--conditions=@envtrain/source" not in os.environ.get("NODE_OPTIONS", ""):
    os.environ["NODE_OPTIONS"] = ("--conditions=@envtrain/source " + os.environ.get("NODE_OPTIONS", "")).strip()
BIN = ROOT / "packages" / "harness" / "src" / "bin.ts"


def run_envtrain(*args: str, env: dict[str, str] | None = None) -> str:
    """The real `envtrain` binary run to completion in the repository root; its stdout and stderr (it must exit 0)."""
    done = subprocess.run(
        [str(TSX), str(BIN), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
        timeout=240,
    )
    assert done.returncode == 0, f"envtrain {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            raise RuntimeError(f"the server exited with {proc.returncode} before listening:\n{out}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise TimeoutError(f"nothing listened on port {port} within {timeout} s")


class EnvtrainServer:
    """`envtrain serve <env>` as a child process; `url` is its base URL."""

    def __init__(self, env: str, *extra: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [str(TSX), str(BIN), "serve", env, "--port", str(self.port), *extra],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1"},
            # tsx runs the server as a child node process: a group of its own lets kill() end both.
            start_new_session=True,
        )
        wait_for_port(self.port, self.proc)
        self.url = f"http://127.0.0.1:{self.port}"

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL to the whole process group (tsx and the node process serving): sockets drop, no close frames.

        Returns once no process of the group is left, so the server's sockets are closed by then."""
        self._signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.01)
        raise TimeoutError(f"the server's process group {self.proc.pid} outlived SIGKILL")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


@pytest.fixture
def envtrain_server():
    """A factory: `envtrain_server("catch", "--max-concurrent-envs", "2")`; every server is stopped after the test."""
    started: list[EnvtrainServer] = []

    def start(env: str, *extra: str) -> EnvtrainServer:
        server = EnvtrainServer(env, *extra)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
