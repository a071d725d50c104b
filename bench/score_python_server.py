#!/usr/bin/env python3
"""The server a user would write without cadre, for bench/score.py: Debian's torch in eager mode
behind Python's stock HTTP server, one request at a time (http.server.HTTPServer), answering the
Open Inference Protocol v2 infer route for the Fashion-MNIST CNN.

    score_python_server.py STATE_DICT PORT_FILE
"""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples", "fashion_mnist"))
from train_horovod import Net  # noqa: E402


def main():
    state, port_file = sys.argv[1], sys.argv[2]
    torch.set_num_threads(os.cpu_count())
    model = Net()
    model.load_state_dict(torch.load(state))
    model.eval()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the C++ clients use

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            inp = body["inputs"][0]
            x = torch.tensor(inp["data"], dtype=torch.float32).view(inp["shape"])
            with torch.no_grad():
                y = model(x)
            answer = json.dumps({"model_name": "fmnist", "outputs": [{
                "name": "output", "datatype": "FP32", "shape": list(y.shape),
                "data": y.flatten().tolist()}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    # Its listen backlog (5) would reset connections at concurrency 16; that is not what the
    # benchmark compares, so it gets the same backlog as cadre-serve.
    HTTPServer.request_queue_size = 4096
    server = HTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
