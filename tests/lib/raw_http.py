"""raw_http.py: HTTP/1.1 over a bare socket, for the suites that must send what no HTTP library
would (malformed framing, pipelined requests, half-closed connections) and see exactly what comes
back: every answer's status, fields and body, and whether the server then closed the connection.
Every read has a deadline. Python's standard library only."""
import socket, time


class Answer:
    def __init__(self, status, reason, fields, body, version):
        self.status, self.reason, self.fields, self.body, self.version = status, reason, fields, body, version

    def field(self, name):
        return self.fields.get(name.lower())

    def __repr__(self):
        return f"<{self.status} {self.reason} {self.body[:80]!r}>"


class Connection:
    """One connection to 127.0.0.1:port; answers are read from what it has received so far."""

    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""
        self.closed = False  # the server closed its side

    def send(self, data):
        self.sock.sendall(data.encode() if isinstance(data, str) else data)

    def send_slowly(self, data, pause):
        for k in range(len(data)):
            self.send(data[k:k + 1])
            time.sleep(pause)

    def half_close(self):
        self.sock.shutdown(socket.SHUT_WR)

    def _fill(self, deadline):
        """More bytes into the buffer; False once the server closed or the deadline passed."""
        left = deadline - time.monotonic()
        if left <= 0 or self.closed:
            return False
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.closed = True
            return False
        self.buffer += data
        return True

    def answer(self, timeout=10, head_only=False):
        """The next answer, or None when none came whole within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill(deadline):
                return None
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        version, status, reason = (lines[0].split(" ", 2) + ["", ""])[:3]
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        length = 0 if head_only or status.startswith("1") else int(fields.get("content-length", "0"))
        while len(self.buffer) < length:
            if not self._fill(deadline):
                return None
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return Answer(int(status), reason, fields, body, version)

    def nothing_yet(self):
        """Whether nothing has arrived from the server so far (looked at without waiting)."""
        if self.buffer or self.closed:
            return False
        self.sock.setblocking(False)
        try:
            self.sock.recv(1, socket.MSG_PEEK)  # a byte, or b"" where the server closed
            return False
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            self.sock.setblocking(True)

    def closed_by_server(self, timeout=5):
        """Whether the server closes the connection within `timeout` seconds, sending nothing more."""
        deadline = time.monotonic() + timeout
        before = len(self.buffer)
        while not self.closed and self._fill(deadline):
            pass
        return self.closed and len(self.buffer) == before

    def quiet_for(self, seconds):
        """Whether nothing at all arrives for `seconds` (the connection stays open and silent)."""
        deadline = time.monotonic() + seconds
        before = len(self.buffer)
        while self._fill(deadline):
            pass
        return not self.closed and len(self.buffer) == before

    def close(self):
        self.sock.close()


def request(method, path, body=b"", fields=None, version="HTTP/1.1"):
    """A well-formed request's bytes: Host, Content-Length when there is a body, then `fields`."""
    body = body.encode() if isinstance(body, str) else body
    head = f"{method} {path} {version}\r\nHost: 127.0.0.1\r\n"
    if body or method in ("POST", "PUT", "PATCH"):
        head += f"Content-Length: {len(body)}\r\n"
    for name, value in (fields or {}).items():
        head += f"{name}: {value}\r\n"
    return head.encode() + b"\r\n" + body
