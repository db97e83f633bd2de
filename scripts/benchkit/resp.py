"""A minimal RESP2 client: enough for set-up, memory figures, replication
offsets and single-client latency. Arguments may be bytes (sent as they are,
so an encoded state goes through `RL.SETSTATE` intact) or anything `str()`
turns into text; bulk replies come back as text (undecodable bytes replaced),
error replies as `ReplyError` values, not raised, from `pipeline`."""

import socket

from . import Abort


class ReplyError(Exception):
    """An error reply from the server."""


def encode(args):
    """One command as RESP: an array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class Client:
    def __init__(self, port, timeout=60):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")

    def close(self):
        self.reader.close()
        self.sock.close()

    def read(self):
        """One reply."""
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise Abort("the server closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return ReplyError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self.reader.read(size + 2)
            return data[:-2].decode(errors="replace")
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self.read() for _ in range(size)]
        raise Abort(f"unexpected reply from the server: {line!r}")

    def send(self, command):
        """Sends one command without reading its reply (see `read`)."""
        self.sock.sendall(encode(command))

    def pipeline(self, commands, batch=1000):
        """Sends `commands` in batches; the replies, errors as ReplyError."""
        replies = []
        for start in range(0, len(commands), batch):
            chunk = commands[start : start + batch]
            self.sock.sendall(b"".join(encode(c) for c in chunk))
            replies.extend(self.read() for _ in chunk)
        return replies

    def call(self, *args):
        """One command; an error reply raises ReplyError."""
        reply = self.pipeline([args])[0]
        if isinstance(reply, ReplyError):
            words = " ".join(a.decode(errors="replace")[:40] if isinstance(a, bytes) else str(a) for a in args)
            raise ReplyError(f"{words}: {reply}")
        return reply

    def info(self, section):
        """INFO `section` as a dict of its `field:value` lines."""
        text = self.call("INFO", section)
        return dict(
            line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#")
        )
