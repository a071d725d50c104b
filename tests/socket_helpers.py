"""Checks of an HTTP server over raw sockets, shared by cadre server's and cadre serve's tests."""
import select
import socket


def peak_rss_kib(pid):
    """The process's largest resident size so far (memory freed since counts too)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def read_answer(sock):
    """What the server sent until it closed (or reset) the connection."""
    data = b""
    sock.settimeout(60)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    return data


def send_endless_head(port, head):
    """Sends `head` and then 100 MiB more of it, as long as the server takes it: (what the server
    answered, MiB sent)."""
    sock = socket.create_connection(("127.0.0.1", port))
    chunk = b"a" * (1 << 20)
    sent = 0
    try:
        sock.sendall(head)
        while sent < 100 << 20:
            sock.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = read_answer(sock)
    sock.close()
    return answer, sent >> 20


def send_chunked(port, head, mib):
    """Sends `head` (ending in a blank line, with Transfer-Encoding: chunked), then a chunked body
    of `mib` chunks of 1 MiB, until the server answers or stops taking it: what the server sent
    until it closed the connection, and the MiB sent."""
    sock = socket.create_connection(("127.0.0.1", port))
    chunk = b"100000\r\n" + b"x" * (1 << 20) + b"\r\n"
    sent = 0
    try:
        sock.sendall(head)
        while sent < mib and not select.select([sock], [], [], 0)[0]:
            sock.sendall(chunk)
            sent += 1
        if sent == mib:
            sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = read_answer(sock)
    sock.close()
    return answer, sent
