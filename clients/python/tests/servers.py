"""Real redis-server processes for the tests, like the Rust tests' `common`:
each on a free loopback port and in its own temporary directory, loading the
module, and killed when the test session ends, so a failing test leaves
nothing behind.

`RL_MODULE` names the module to load (default: the debug build `make test`
makes), `RL_SERVER` and `RL_CLI` another server and cluster tool (e.g. Valkey's).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parents[3]


def module_path() -> Path:
    """The module under test: `RL_MODULE`, or the debug build."""
    path = Path(os.environ.get("RL_MODULE", REPO / "target/debug/libredis_ratelimit.so"))
    if not path.exists():
        raise RuntimeError(
            f"{path} is missing: build it first (`make test` does), or set RL_MODULE"
        )
    return path


def free_port() -> int:
    """A loopback port nobody listens on right now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(what: str, timeout_s: float, done: Callable[[], bool]) -> None:
    """Polls `done` until it is true; fails the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout_s} s")
        time.sleep(0.02)


class Server:
    """One redis-server with the module, no persistence."""

    def __init__(
        self, *, cluster: bool = False, module: bool = True, args: tuple[str, ...] = ()
    ) -> None:
        self.password: str | None = None
        if "--requirepass" in args:
            self.password = args[args.index("--requirepass") + 1]
        self.dir = Path(tempfile.mkdtemp(prefix="rl-pytest-"))
        self.port = free_port()
        extra = list(args)
        command = [
            os.environ.get("RL_SERVER", "redis-server"),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        if module:
            command += ["--loadmodule", str(module_path())]
        command += extra
        if cluster:
            # The bus on a free port of its own: port + 10000 may be taken.
            command += [
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                str(free_port()),
                "--cluster-node-timeout",
                "1000",
            ]
        self._log = open(self.dir / "server.log", "wb")  # noqa: SIM115 (closed by stop)
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            wait_for("redis-server to answer PING", 10, self._answers)
        except TimeoutError:
            self.stop()
            raise RuntimeError("redis-server did not start; its log:\n" + self.log()) from None

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError("redis-server exited; its log:\n" + self.log())
        try:
            client = redis.Redis(port=self.port, password=self.password, socket_timeout=1)
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    def log(self) -> str:
        return (self.dir / "server.log").read_text(errors="replace")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """Three primaries without replicas, every slot served, module loaded on
    each: enough for the client to route by key and to meet CROSSSLOT."""

    def __init__(self, size: int = 3) -> None:
        self.nodes: list[Server] = []
        try:
            for _ in range(size):
                self.nodes.append(Server(cluster=True))
            subprocess.run(
                [
                    os.environ.get("RL_CLI", "redis-cli"),
                    "--cluster",
                    "create",
                    *(f"127.0.0.1:{n.port}" for n in self.nodes),
                    "--cluster-yes",
                ],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=True,
                timeout=30,
            )
            wait_for("a healthy cluster", 30, self._healthy)
        except BaseException:
            self.stop()
            raise

    def _healthy(self) -> bool:
        for node in self.nodes:
            info = redis.Redis(port=node.port).cluster("info")  # parsed into a dict
            if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != "16384":
                return False
        return True

    @property
    def port(self) -> int:
        return self.nodes[0].port

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
