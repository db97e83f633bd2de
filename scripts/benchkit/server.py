"""redis-server processes for the bench: each on a free loopback port, in
its own directory under the run's temporary one, with no persistence; stopped
by `stop()` (the callers' `finally` blocks), and killed with this process
should it die any other way (Linux's parent-death signal). A primary with one
replica is two of them, `replicaof` the first, returned once the initial sync
is done. `cpu_ns` reads a server's CPU time from /proc."""

import ctypes
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from . import Abort
from .resp import Client, ReplyError



def die_with_parent():
    """In a child before exec: be killed when this process dies, however it
    dies (Linux; elsewhere the `finally` blocks are the only guard)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def cpu_ns(pid):
    """Nanoseconds the main thread of process `pid` (the thread that runs
    every command) has spent on a CPU: the first field of
    /proc/<pid>/schedstat, kept by the scheduler to the nanosecond, unlike
    the clock ticks (10 ms) of /proc/<pid>/stat."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, IndexError, ValueError) as e:
        raise Abort(
            f"cannot read the server's CPU time ({e}): the bench needs Linux's /proc/<pid>/schedstat "
            "(CONFIG_SCHEDSTATS)"
        )


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One redis-server. `modules`: the .so files to load; `extra`: more
    command-line arguments."""

    def __init__(self, binary, modules, workdir, name="server", extra=()):
        self.binary = binary
        self.modules = list(modules)
        self.workdir = Path(workdir) / name
        self.name = name
        self.extra = list(extra)
        self.process = None
        self.port = None

    @property
    def pid(self):
        return self.process.pid

    def start(self):
        self.workdir.mkdir(parents=True, exist_ok=True)
        log_path = self.workdir / "server.log"
        for _attempt in range(5):
            self.port = _free_port()
            args = [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--protected-mode", "yes",
                "--dir", str(self.workdir),
                "--save", "",
                "--appendonly", "no",
                "--daemonize", "no",
                # DEBUG SET-ACTIVE-EXPIRE, for the memory figures.
                "--enable-debug-command", "local",
            ]
            for module in self.modules:
                args += ["--loadmodule", str(module)]
            args += self.extra
            with open(log_path, "wb") as log:
                self.process = subprocess.Popen(
                    args,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    preexec_fn=die_with_parent,
                )
            if self._wait_ready(10):
                return self
            self.stop()
            text = log_path.read_text(errors="replace")
            if "Address already in use" not in text:
                raise Abort(f"redis-server ({self.name}) did not start:\n{text[-2000:]}")
        raise Abort(f"redis-server ({self.name}) found no free port in 5 tries")

    def _wait_ready(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.process.poll() is not None:
                return False
            try:
                client = Client(self.port, timeout=2)
                try:
                    if client.call("PING") == "PONG":
                        return True
                finally:
                    client.close()
            except (OSError, ReplyError, Abort):
                time.sleep(0.05)
        return False

    def client(self, timeout=60):
        return Client(self.port, timeout=timeout)

    def cpu_ns(self):
        return cpu_ns(self.pid)

    def log_tail(self, chars=2000):
        try:
            return (self.workdir / "server.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self):
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


class Servers:
    """Servers started together and stopped together (a `with` block)."""

    def __init__(self):
        self.all = []

    def start(self, server):
        self.all.append(server)
        return server.start()

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        for server in reversed(self.all):
            server.stop()


# The replica's first sync starts at once rather than after 5 s.
NO_SYNC_DELAY = ["--repl-diskless-sync-delay", "0"]


def start_replica_pair(servers, binary, modules, workdir, timeout=60):
    """A primary and one replica of it (both loading `modules`), started
    into `servers`; returns (primary, replica) once the replica's link is up,
    its initial sync done, and it has caught up with the primary's offset."""
    primary = servers.start(Server(binary, modules, workdir, "primary", NO_SYNC_DELAY))
    replica = servers.start(
        Server(binary, modules, workdir, "replica", NO_SYNC_DELAY + ["--replicaof", "127.0.0.1", str(primary.port)])
    )
    wait_in_sync(primary, replica, timeout)
    return primary, replica


def wait_in_sync(primary, replica, timeout=60):
    """Waits until the replica is online, done with its initial sync, and at
    the primary's replication offset."""
    end = time.monotonic() + timeout
    p, r = primary.client(), replica.client()
    try:
        while True:
            rinfo = r.info("replication")
            pinfo = p.info("replication")
            slave = pinfo.get("slave0", "")
            fields = dict(f.split("=", 1) for f in slave.split(",") if "=" in f)
            if (
                rinfo.get("master_link_status") == "up"
                and rinfo.get("master_sync_in_progress") == "0"
                and fields.get("state") == "online"
                and fields.get("offset") == pinfo.get("master_repl_offset")
            ):
                return
            if time.monotonic() > end:
                raise Abort(
                    f"the replica did not sync with the primary in {timeout} s "
                    f"(replica: link {rinfo.get('master_link_status')}, primary: {slave or 'no replica'})\n"
                    f"{replica.log_tail()}"
                )
            time.sleep(0.05)
    finally:
        p.close()
        r.close()
