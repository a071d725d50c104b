"""`cadre serve`'s connections over real sockets, as cadre server's (tests/service/
test_service_connections.py): clients that connect and send nothing, or send a request a byte at
a time, do not hold its HTTP threads, and a huge request line is refused without the scorer
reading it into memory, nor a chunked body over the size limit. No timed assertions: every wait is bounded, none is measured."""
import http.client
import json
import os
import socket

import pytest

torch = pytest.importorskip("torch")
import cadre  # noqa: E402
from serve_helpers import CADRE_SERVE, Server  # noqa: E402
from socket_helpers import (peak_rss_kib, read_answer, send_chunked,  # noqa: E402
                            send_endless_head)

pytestmark = pytest.mark.skipif(not os.path.exists(CADRE_SERVE),
                                reason="cadre-serve is not built (CADRE_WITH_SERVING=OFF)")


def assert_ready(s):
    """The scorer still answers."""
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    conn.request("GET", "/v2/health/ready")
    assert conn.getresponse().status == 200
    conn.close()


@pytest.fixture(scope="module")
def linear(tmp_path_factory):
    torch.manual_seed(3)
    model = torch.nn.Linear(4, 2).eval()
    path = str(tmp_path_factory.mktemp("models") / "linear")
    cadre.save_model(model, torch.zeros(1, 4), path=path)
    return model, path


def test_idle_and_slow_clients_do_not_hold_the_http_threads(linear):
    model, path = linear
    s = Server(path, "--http-threads", "2")
    idle = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(50)]
    slow = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(50)]
    try:
        for i, sock in enumerate(slow):  # a head, or a body, begun and not finished
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: " if i % 2 else
                         b"POST /v2/models/linear/infer HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: 1000\r\n\r\n{")
        rows = [[0.5, -1.0, 2.0, 0.25]]
        status, doc = s.infer("linear", {"input": ("FP32", [1, 4], rows[0])})
        assert status == 200, doc
        with torch.no_grad():
            expected = model(torch.tensor(rows)).flatten().tolist()
        assert doc["outputs"][0]["data"] == pytest.approx(expected, rel=1e-5)
        for sock in slow:  # they are still open, and still being waited for
            sock.sendall(b"a")
    finally:
        for sock in idle + slow:
            sock.close()
        assert s.stop() == 0, s.output


def test_a_huge_request_line_is_refused_with_bounded_memory(linear):
    s = Server(linear[1])
    try:
        before = peak_rss_kib(s.proc.pid)
        answer, sent = send_endless_head(s.port, b"POST /v2/models/linear/infer")
        grown = peak_rss_kib(s.proc.pid) - before
        assert grown < 32 << 10, f"the scorer grew by {grown} KiB, sent a {sent} MiB line"
        if answer:  # when the connection was not reset under it
            assert answer.startswith(b"HTTP/1.1 414 "), answer[:200]
        # Just over the limit, sent whole before the client reads: the answer is seen, in the
        # v2 routes' error shape.
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(b"GET /" + b"a" * (64 << 10))
        answer = read_answer(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 414 "), answer[:200]
        assert "request line is longer" in json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
        # And the scorer carries on.
        assert_ready(s)
    finally:
        assert s.stop() == 0, s.output


@pytest.mark.parametrize("path", [b"/ml/v4/deployments/linear/predictions",
                                  b"/v2/models/linear/infer"])
def test_a_chunked_body_over_the_limit_is_refused_with_bounded_memory(linear, path):
    # A chunked body has no length to refuse it by: the scorer stops reading it at the limit.
    s = Server(linear[1], "--max-request-bytes", str(1 << 20))
    try:
        head = (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        before = peak_rss_kib(s.proc.pid)
        answer, sent = send_chunked(s.port, head, 64)  # the limit and 63 MiB more
        grown = peak_rss_kib(s.proc.pid) - before
        assert grown < 24 << 10, f"the scorer grew by {grown} KiB, sent {sent} MiB"
        assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
        assert b"Connection: close" in answer, answer[:500]
        doc = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        # In the route's error shape: WML's on /ml/v4, {"error": ...} on /v2.
        if path.startswith(b"/ml/"):
            assert doc["errors"][0]["code"] == "payload_too_large", doc
            assert "larger than this server takes" in doc["errors"][0]["message"], doc
        else:
            assert "larger than this server takes" in doc["error"], doc
        # And the scorer carries on.
        assert_ready(s)
    finally:
        assert s.stop() == 0, s.output
