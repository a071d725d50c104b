"""The server's connections over real sockets: clients that connect and send nothing, or send a
request's head a byte at a time, do not hold its worker threads; a huge request line or header
is refused without the server reading it into memory; kept-alive and pipelined requests are
served. No timed assertions: every wait is bounded, none is measured."""
import http.client
import resource
import socket
import threading

import pytest

from socket_helpers import peak_rss_kib, read_answer, send_endless_head


def port_of(server):
    return int(server.url.rsplit(":", 1)[1])


def assert_live(port):
    """The server answers a new connection's liveness question."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/v2/health/live")
    answer = conn.getresponse()
    assert answer.status == 200 and answer.read() == b'{"live":true}'
    conn.close()


def trickle(socks, stop):
    """Sends each socket its byte every 0.2 s until `stop` (not once the server has closed it)."""
    while not stop.wait(0.2):
        for s, byte in socks:
            try:
                s.sendall(byte)
            except OSError:
                pass


def test_idle_and_slow_clients_do_not_stall_the_server(make_server):
    server = make_server(extra=["--threads", "4"])
    port = port_of(server)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
    slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
    # A head, or a small body, a byte at a time, each byte well within the server's read
    # timeout: with a thread per connection these would hold every worker for as long as they
    # go on.
    for i, s in enumerate(slow):
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: " if i % 2 else
                  b"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
    stop = threading.Event()
    trickler = threading.Thread(target=trickle, args=([(s, b"a") for s in slow], stop))
    trickler.start()
    try:
        assert_live(port)
        # ... while the slow clients are still sending (their connections are open).
        for s in slow:
            s.sendall(b"a")
    finally:
        stop.set()
        trickler.join(timeout=60)
        for s in idle + slow:
            s.close()


def test_waiting_connections_never_use_up_the_servers_files(make_server):
    # With 256 files: past what the server keeps waiting, the longest waiting is closed, and
    # a new client is still accepted (accept() failed with EMFILE once 256 were open).
    def few_files():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    server = make_server(preexec_fn=few_files)
    port = port_of(server)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
    try:
        assert_live(port)
        # The first ones were closed to make room: they read the end of their connection.
        idle[0].settimeout(60)
        assert idle[0].recv(1) == b""
    finally:
        for s in idle:
            s.close()


@pytest.mark.parametrize("head, status", [
    (b"GET /", 414),                                  # a request line without end
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ", 431),  # a header line without end
])
def test_a_huge_head_is_refused_without_being_read_into_memory(make_server, head, status):
    server = make_server()
    port = port_of(server)
    before = peak_rss_kib(server.proc.pid)
    answer, sent = send_endless_head(port, head)
    grown = peak_rss_kib(server.proc.pid) - before
    print(f"peak resident size grew by {grown} KiB; {sent} MiB sent")
    assert grown < 32 << 10, f"the server grew by {grown} KiB at its peak, sent a {sent} MiB head"
    # The answer (when the connection was not reset under it) says why.
    if answer:
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:200]
    # A head just over the limit, sent whole before the client reads: the answer is seen.
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(head + b"a" * (64 << 10))
    answer = read_answer(sock)
    sock.close()
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:200]
    assert b'"errors"' in answer and b'"trace"' in answer, answer
    # And the server carries on.
    assert_live(port)


def test_a_long_uri_is_refused_in_the_services_error_shape(server):
    # Longer than cpp-httplib's own limit (8 KiB), shorter than the lobby's: its 414.
    sock = socket.create_connection(("127.0.0.1", port_of(server)))
    sock.settimeout(60)
    sock.sendall(b"GET /" + b"a" * (16 << 10) + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = http.client.HTTPResponse(sock)
    answer.begin()
    body = answer.read()
    sock.close()
    assert answer.status == 414 and b'"uri_too_long"' in body, body


def test_kept_alive_and_pipelined_requests_are_served(server):
    port = port_of(server)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for _ in range(3):  # one connection, one request after another
        conn.request("GET", "/v2/health/live")
        answer = conn.getresponse()
        assert answer.status == 200 and answer.read() == b'{"live":true}'
    conn.close()
    # Two requests sent at once, before either answer: both answered, in order.
    sock = socket.create_connection(("127.0.0.1", port))
    request = b"GET /v2/health/%s HTTP/1.1\r\nHost: x\r\n%s\r\n"
    sock.sendall(request % (b"live", b"") + request % (b"ready", b"Connection: close\r\n"))
    answer = read_answer(sock)
    sock.close()
    assert answer.count(b"HTTP/1.1 200 OK") == 2, answer
    assert answer.index(b'{"live":true}') < answer.index(b'{"ready":true}'), answer


SLOW_BODIES = {
    # A chunked body, a chunk of one byte at a time.
    "chunked": (b"Transfer-Encoding: chunked\r\n", b"1\r\na\r\n"),
    # A body over the 64 KiB the lobby waits for, a byte at a time.
    "large": (b"Content-Length: 1000000\r\n", b"a"),
}


@pytest.mark.parametrize("kind", sorted(SLOW_BODIES))
def test_slow_bodies_are_cut_off_and_free_the_threads(make_server, kind):
    # A worker thread reads a large, chunked or 100-continue body; a client that sent it a
    # byte at a time held that thread for as long as it went on (four of them, and a server
    # with four threads answered nobody). Now such a body has a deadline, and such requests
    # take at most a quarter of the threads (here one).
    server = make_server(extra=["--threads", "4", "--request-timeout", "2"])
    port = port_of(server)
    header, byte = SLOW_BODIES[kind]
    head = b"POST /nowhere HTTP/1.1\r\nHost: x\r\n" + header + b"Expect: 100-continue\r\n\r\n"

    def upload():
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.sendall(head)
        return s, s.recv(64)
    slow, answer = upload()
    # Expect: 100-continue makes the server say when a worker has taken the request.
    assert answer.startswith(b"HTTP/1.1 100 Continue"), answer
    stop = threading.Event()
    trickler = threading.Thread(target=trickle, args=([(slow, byte)], stop))
    trickler.start()
    try:
        # Served while the slow one trickles.
        assert_live(port)
        # Cut off while it still sends, its worker and its place freed.
        answer = read_answer(slow)
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout"), answer
        assert b'"request_timeout"' in answer and b"arrived too slowly" in answer, answer
    finally:
        stop.set()
        trickler.join(timeout=60)
        slow.close()
    s, answer = upload()
    s.close()
    assert answer.startswith(b"HTTP/1.1 100 Continue"), answer


def test_a_large_body_sent_slowly_without_expect_gets_408(make_server):
    server = make_server(extra=["--request-timeout", "2"])
    s = socket.create_connection(("127.0.0.1", port_of(server)), timeout=60)
    s.sendall(b"POST /ml/v4/trainings HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" +
              b"a" * (70 << 10))
    stop = threading.Event()
    trickler = threading.Thread(target=trickle, args=([(s, b"a")], stop))
    trickler.start()
    try:
        answer = read_answer(s)
    finally:
        stop.set()
        trickler.join(timeout=60)
        s.close()
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout"), answer
    # The server carries on.
    assert_live(port_of(server))
