"""Fixtures for the `cadre server` tests: a started server with its own data directory."""
import os

import pytest

from service_helpers import CADRE, Server


@pytest.fixture
def make_server(tmp_path):
    """make_server(slots=2, grace=2, extra=()) starts a server; all are cleaned up after."""
    if not os.path.exists(CADRE):
        pytest.fail(f"{CADRE} is not built (set CADRE_BUILD_DIR or run `make build`)")
    servers = []

    def make(data_dir=None, **kw):
        server = Server(data_dir or tmp_path / "data", **kw)
        servers.append(server)
        return server.start()

    yield make
    for s in servers:
        s.cleanup()


@pytest.fixture
def server(make_server):
    return make_server()
