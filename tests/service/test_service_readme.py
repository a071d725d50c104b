"""The README's "As a service" block, run as written, so that it cannot drift from what the
programs do: the server started in the background, a user added, the Fashion-MNIST example
submitted and its log followed to the job's end.

Only what the README leaves to its reader is substituted: the built cadre program for
build/cadre, a private folder for /tmp/cadre-data and a free port for 8900 (another server may
hold it; the server is given it with --listen, the clients with CADRE_SERVER, as a reader whose
port 8900 is taken would do). Nothing waits between the commands: the block must work as typed."""
import os
import re
import socket
import subprocess

from service_helpers import CADRE, kill_processes_mentioning

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
README = os.path.join(ROOT, "README.md")


def service_block():
    text = open(README).read()
    section = re.search(r"^## As a service\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "README.md has no '## As a service' section any more"
    blocks = re.findall(r"^```sh\n(.*?)^```", section.group(1), re.S | re.M)
    assert len(blocks) == 1, blocks
    return blocks[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_readme_service_block_runs_as_written(tmp_path):
    block = service_block()
    port = free_port()
    data = str(tmp_path / "cadre-data")
    for needed in ("build/cadre server", "users add", "cadre submit", "jobs logs -f", "8900"):
        assert needed in block, f"the README's block no longer has {needed!r}:\n{block}"
    script = (block.replace("build/cadre server", f"build/cadre server --listen 127.0.0.1:{port}")
              .replace("build/cadre", CADRE).replace("/tmp/cadre-data", data)
              .replace("8900", str(port)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CADRE_")}
    env["CADRE_SERVER"] = f"http://127.0.0.1:{port}"
    out_path = tmp_path / "out.txt"
    try:
        # Into a file: the server started in the background keeps its output open.
        with open(out_path, "w") as out:
            run = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=ROOT,
                                 env=env, stdout=out, stderr=subprocess.STDOUT, timeout=1200)
        text = open(out_path).read()
        assert run.returncode == 0, text
        # Followed to the end: rank 0's test accuracy over all 4 ranks (2 learners x 2 slots),
        # then the runner's last word, that the job completed.
        assert re.search(r"^\[learner-1/0\] test accuracy .* on 4 ranks", text, re.M), text
        assert re.search(r"^cadre: job training-\S+ completed", text, re.M), text
        token = re.search(r"sign in with (cadre_\w+)$", text, re.M)
        assert token, text
        # The dashboard is where the README says, and the token printed signs in.
        me = subprocess.run(["curl", "-s", "-H", f"Authorization: Bearer {token.group(1)}",
                             f"http://127.0.0.1:{port}/v1/me"], stdout=subprocess.PIPE,
                            text=True, timeout=60)
        assert '"name":"me"' in me.stdout, me.stdout
    finally:
        kill_processes_mentioning(data, "the README's server and job")
