"""docs/service.md's shell examples, run as written, so that the page stays true.

Every ```sh block of the page runs, in order, in one bash session (`set -euo pipefail`) started
in the repository's root, with only what the page leaves to its reader substituted: the port (a
free one for 8900, which another server may hold), where its files go (a private folder for
/tmp) and the built cadre program (for build/cadre). After the block that starts the server the
harness waits for it to answer, as a reader waits for its "listening" line. Then each block's
output is checked against what the page says it does."""
import json
import os
import re
import socket
import subprocess

from service_helpers import CADRE, kill_processes_mentioning, pids_of_processes_mentioning, wait_for

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(ROOT, "docs", "service.md")
MARK = "@@ docs block "


def shell_blocks(text):
    return re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def json_documents(text):
    """The JSON objects in `text` (curl adds no newline after a body; other lines between)."""
    decoder = json.JSONDecoder()
    out, i = [], 0
    while i < len(text):
        if text[i] == "{":
            try:
                value, i = decoder.raw_decode(text, i)
                out.append(value)
                continue
            except json.JSONDecodeError:
                pass
        i += 1
    return out


def test_service_md_shell_examples_run_as_written(tmp_path):
    blocks = shell_blocks(open(DOC).read())
    port = free_port()
    data = str(tmp_path / "cadre-data")
    substitutes = {"build/cadre": CADRE, "8900": str(port), "/tmp/cadre-data": data,
                   "/tmp/": str(tmp_path) + "/"}
    pattern = re.compile("|".join(re.escape(k) for k in substitutes))

    script = ["set -euo pipefail"]
    for i, block in enumerate(blocks):
        # A newline first: curl prints a body without one.
        script += [f"echo; echo '{MARK}{i}'", pattern.sub(lambda m: substitutes[m.group(0)], block)]
        if "cadre server" in block:
            script.append(f"for i in $(seq 600); do curl -s -o /dev/null http://127.0.0.1:{port}/"
                          " && break; sleep 0.1; done")
    script.append(f"echo; echo '{MARK}end'")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CADRE_")}
    out_path = tmp_path / "out.txt"
    try:
        # Into a file: the server started in the background keeps its output open.
        with open(out_path, "w") as out:
            run = subprocess.run(["bash", "-c", "\n".join(script)], cwd=ROOT, env=env,
                                 stdout=out, stderr=subprocess.STDOUT, timeout=900)
        text = open(out_path).read()
        assert run.returncode == 0 and text.rstrip().endswith(f"{MARK}end"), text
        outputs = re.split(rf"^{re.escape(MARK)}\S+\n", text, flags=re.M)[1:]
        check_outputs(list(zip(blocks, outputs)), data)
    finally:
        kill_processes_mentioning(data, "the docs' server and jobs")


def check_outputs(ran, data):
    def output_of(fragment):
        found = [out for block, out in ran if fragment in block]
        assert found, f"no block of docs/service.md has {fragment!r} any more"
        return found[0]

    # The token alone on a line (the server, started in the background, prints beside it).
    assert re.search(r"^cadre_\w+$", output_of("users add ada"), re.M), output_of("users add ada")

    [hello] = json_documents(output_of('"name": "hello"'))
    assert hello["metadata"]["name"] == "hello", hello
    [fmnist] = json_documents(output_of("-F manifest="))
    assert fmnist["metadata"]["name"] == "fashion-mnist-horovod", fmnist

    listed, got = json_documents(output_of("limit=10&state=completed"))
    assert set(listed) >= {"total_count", "limit", "resources"}, listed
    assert got["metadata"]["id"] == hello["metadata"]["id"], got  # $ID is the hello job

    # Followed to its end, twice (curl, then cadre jobs logs -f): every learner's line.
    logs = output_of("follow=true")
    for learner in (1, 2):
        assert logs.count(f"hello from {learner}") == 2, logs

    canceled = output_of("hard_delete=true")
    fmnist_id = fmnist["metadata"]["id"]
    assert f"cadre jobs cancel: {fmnist_id} canceled" in canceled, canceled
    # Deleted with its files once its learners were gone; nothing of it left running.
    wait_for(f"{fmnist_id}'s job directory to be removed",
             lambda: not os.path.exists(os.path.join(data, "jobs", fmnist_id)), timeout=120)
    assert not pids_of_processes_mentioning(fmnist_id)
