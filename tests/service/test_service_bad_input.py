"""Every kind of bad input gets its HTTP status and a WML error naming the problem, and the
server carries on."""
import json
import socket
import subprocess
import urllib.parse

import pytest

from service_helpers import CADRE, make_zip, multipart, wml_body

MANIFEST = ("name: zipped\nframework: {name: pytorch}\n"
            "execution: {command: python3 train.py, compute_configuration: {name: cpu, nodes: 1}}\n")


@pytest.fixture
def ada(make_server):
    server = make_server(extra=["--max-code-mib", "4"])
    return server.client(server.add_user("ada"))


def test_malformed_json(ada):
    r = ada.api("POST", "", body="{\"name\": ", content_type="application/json")
    assert r.status == 400 and r.error_codes() == ["invalid_json"], r
    assert r.json()["trace"]


@pytest.mark.parametrize("body, target, words", [
    (wml_body("true", nodes="two"), "hardware_spec.nodes", "integer"),
    (dict(wml_body("true"), hardware_spec=[1]), "hardware_spec", "object"),
    (wml_body("true", framework="caffe"), "software_spec.name", "caffe"),
    (wml_body("true", nodes=0), "hardware_spec.nodes", "at least 1"),
    (wml_body("true", nodes=10**9), "hardware_spec.nodes", "at most"),
    # A null was taken as left out: the job ran 1 learner, its resource showing "nodes": null.
    (wml_body("true", nodes=None), "hardware_spec.nodes", "got null"),
    (wml_body("true", compute="tpu"), "hardware_spec.name", "tpu"),
    ({"name": "no-command", "software_spec": {"name": "pytorch"}}, "model_definition.command",
     ""),
    # Numbers where text belongs were taken as their spelling ("command": 5 ran `5`).
    (dict(wml_body("true"), name=5), "name", "expected a string"),
    (dict(wml_body("true"), model_definition={"command": 5}), "model_definition.command",
     "expected a string"),
    (dict(wml_body("true"), software_spec={"name": "pytorch", "version": 1.13}),
     "software_spec.version", "expected a string"),
    (dict(wml_body("true"), training_data_references=[{"type": "fs", "location": {"path": 5}}]),
     "training_data_references[0]", "path"),
    # A "type" that is not a string was a 500 (an exception inside the handler).
    (dict(wml_body("true"), training_data_references=[{"type": 5, "location": {"path": "/"}}]),
     "training_data_references[0]", "fs"),
])
def test_bad_fields_are_named(ada, body, target, words):
    r = ada.submit_json(body)
    assert r.status == 400, r
    assert target in r.error_targets(), r
    assert words in json.dumps(r.json()["errors"]), r


DATA = {"type": "fs", "location": {"path": "/usr/share"}}


@pytest.mark.parametrize("body, target, words", [
    # Misspelled fields were silently ignored: the job ran without them.
    (dict(wml_body("true"), nmae="x"), "nmae", "did you mean 'name'"),
    (dict(wml_body("true"), training_data_references=[dict(DATA, conection={})]),
     "training_data_references[0].conection", "did you mean 'connection'"),
    (dict(wml_body("true"), training_data_references=[
        {"type": "fs", "location": {"pth": "/usr/share"}}]),
     "training_data_references[0].location.pth", "did you mean 'path'"),
    (dict(wml_body("true"), hardware_spec={"name": "cpu", "nodse": 2}), "hardware_spec.nodse",
     "did you mean 'nodes'"),
    (dict(wml_body("true"), hardware_spec={"name": "cpu", "num_nodes": 2}),
     "hardware_spec.num_nodes", "known here: name, nodes, parameter_servers"),
    (dict(wml_body("true"), software_spec={"name": "pytorch", "verison": "1.13"}),
     "software_spec.verison", "did you mean 'version'"),
    (dict(wml_body("true"), model_definition={"command": "true", "comand": "false"}),
     "model_definition.comand", "did you mean 'command'"),
    # Where WML nests the specs: said where this server reads them.
    (dict(wml_body("true"), model_definition={"command": "true",
                                              "hardware_spec": {"name": "cpu", "nodes": 2}}),
     "model_definition.hardware_spec", "top level"),
    (dict(wml_body("true"), experiment={"id": "x"}), "experiment", "not supported"),
    (dict(wml_body("true"), tags="a"), "tags", "a list of strings"),
    (dict(wml_body("true"), custom=[]), "custom", "an object"),
])
def test_unknown_fields_are_refused_with_their_path(ada, body, target, words):
    r = ada.submit_json(body)
    assert r.status == 400, r
    assert target in r.error_targets(), r
    assert words in json.dumps(r.json()["errors"]), r


def test_every_unknown_field_is_reported_at_once(ada):
    body = dict(wml_body("true", nodes=0), nmae="x", hardware_spec={"name": "cpu", "nodse": 1})
    r = ada.submit_json(body)
    assert r.status == 400, r
    assert {"nmae", "hardware_spec.nodse"} <= set(r.error_targets()), r


def test_fields_wml_clients_send_are_accepted(ada):
    body = dict(wml_body("true"), description="a job", tags=["a", "b"], custom={"k": 1},
                space_id="s", project_id="p",
                results_reference={"type": "fs", "location": {"path": "runs"}},
                training_data_references=[dict(DATA, id="d", connection={}, schema={})])
    r = ada.submit_json(body)
    assert r.status == 201, r
    entity = r.json()["entity"]
    assert entity["description"] == "a job" and entity["tags"] == ["a", "b"], entity
    # Results always go to the job's directory, whatever the body asked.
    assert entity["results_reference"]["location"]["path"].endswith(
        r.json()["metadata"]["id"]), entity


@pytest.mark.parametrize("body, target, words", [
    ({"name": "d", "onlien": {}, "online": {}, "asset": {"id": "m"}}, "onlien",
     "did you mean 'online'"),
    ({"name": "d", "online": {"paramters": {}}, "asset": {"id": "m"}}, "online.paramters",
     "did you mean 'parameters'"),
    ({"name": "d", "online": {}, "asset": {"id": "m", "idd": "n"}}, "asset.idd",
     "did you mean 'id'"),
])
def test_unknown_deployment_fields_are_refused(ada, body, target, words):
    r = ada.request("POST", "/ml/v4/deployments?version=2020-09-01", body=json.dumps(body),
                    content_type="application/json")
    assert r.status == 400, r
    assert target in r.error_targets(), r
    assert words in json.dumps(r.json()["errors"]), r


def test_deployment_fields_wml_clients_send_are_accepted(ada):
    body = {"name": "d", "description": "x", "tags": ["t"], "space_id": "s",
            "hardware_spec": {"name": "S"}, "online": {"parameters": {"serving_name": "d"}},
            "asset": {"id": "model-none", "rev": "1"}}
    r = ada.request("POST", "/ml/v4/deployments?version=2020-09-01", body=json.dumps(body),
                    content_type="application/json")
    # Past the fields' checks: the model does not exist.
    assert r.status == 404 and r.error_targets() == ["asset.id"], r


def test_the_client_prints_no_list_for_a_wrong_token(ada):
    out = subprocess.run([CADRE, "jobs", "list", "--server", ada.url, "--token", "cadre_x_y"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert out.returncode == 1 and "not valid" in out.stderr, out.stderr
    assert out.stdout == "", out.stdout


def test_missing_or_wrong_token(ada):
    anonymous = ada.__class__(ada.url)
    r = anonymous.api("GET", "")
    assert r.status == 401 and "Authorization" in r.json()["errors"][0]["message"], r
    wrong = ada.__class__(ada.url, ada.token[:-4] + "0000")
    assert wrong.api("GET", "").status == 401
    assert ada.__class__(ada.url, "garbage").submit_json(wml_body("true")).status == 401


def test_missing_version(ada):
    r = ada.request("GET", "/ml/v4/trainings")
    assert r.status == 400 and r.error_codes() == ["missing_version"], r
    r = ada.request("GET", "/ml/v4/trainings?version=yesterday")
    assert r.status == 400 and r.error_codes() == ["invalid_version"], r
    for not_a_day in ("2020-13-01", "2021-02-29", "2020-00-10", "2020-09-00"):
        r = ada.request("GET", f"/ml/v4/trainings?version={not_a_day}")
        assert r.status == 400 and r.error_codes() == ["invalid_version"], (not_a_day, r)
    assert ada.request("GET", "/ml/v4/trainings?version=2020-02-29").status == 200


def test_a_json_body_sent_as_a_form_says_to_send_json(ada):
    # `curl -d @body.json` without a Content-Type: past 8 KiB cpp-httplib refused it as too large.
    body = json.dumps(dict(wml_body("true"), description="x" * 10000))
    r = ada.api("POST", "", body=body, content_type="application/x-www-form-urlencoded")
    assert r.status == 415 and "Content-Type: application/json" in r.body, r
    assert ada.api("POST", "", body=body, content_type="application/json").status == 201


def test_a_huge_body_is_refused_before_it_is_read(make_server):
    # The server would wait 600 s for the rest of the body: a 413 within the client's 60 s
    # comes from the Content-Length alone (it used to come only when the read timed out).
    server = make_server(extra=["--request-timeout", "600"])
    ada = server.client(server.add_user("ada"))
    host, port = urllib.parse.urlsplit(ada.url).netloc.split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall((f"POST /ml/v4/trainings?version=2020-09-01 HTTP/1.1\r\nHost: {host}\r\n"
                   f"Authorization: Bearer {ada.token}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {2 << 30}\r\n\r\n").encode() + b"{" * 1024)
        answer = s.recv(4096).decode()
    assert answer.startswith("HTTP/1.1 413"), answer
    assert ada.api("GET", "").status == 200  # and the server is fine


def test_a_client_that_asks_first_is_refused_a_huge_body_at_once(ada):
    # curl sends `Expect: 100-continue` before a large upload: the 413 comes from the
    # Content-Length, and the body is never sent (it used to get 100 Continue, then the 413).
    host, port = urllib.parse.urlsplit(ada.url).netloc.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall((f"POST /ml/v4/trainings?version=2020-09-01 HTTP/1.1\r\nHost: {host}\r\n"
                   f"Authorization: Bearer {ada.token}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {2 << 30}\r\nExpect: 100-continue\r\n\r\n").encode())
        answer = b""  # the headers and the body may come in separate segments
        while b"payload_too_large" not in answer and (chunk := s.recv(4096)):
            answer += chunk
        answer = answer.decode()
    assert answer.startswith("HTTP/1.1 413") and "payload_too_large" in answer, answer
    assert ada.api("GET", "").status == 200


def ask_first(client, path, length):
    """What the server answers to headers with `Expect: 100-continue`, the body unsent."""
    host, port = urllib.parse.urlsplit(client.url).netloc.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: {host}\r\n"
                   f"Authorization: Bearer {client.token}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {length}\r\nExpect: 100-continue\r\n\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer or (answer.startswith(b"HTTP/1.1 4")
                                             and not answer.endswith(b"}")):
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
        return answer.decode()


@pytest.mark.parametrize("path", [
    "/ml/v4/deployments/deployment-any/predictions?version=2020-09-01",
    "/v2/models/deployment-any/infer",
])
def test_a_prediction_over_the_deployments_limit_is_refused_before_it_is_sent(ada, path):
    # Between --max-prediction-mib (16) and the server's own limit (256 MiB) the client was told
    # 100 Continue, uploaded it all, and only then got the 413. Now the Content-Length decides:
    # the 413 comes while the body is still unsent.
    answer = ask_first(ada, path, 100 << 20)
    assert answer.startswith("HTTP/1.1 413"), answer
    assert "larger than a deployment takes (16777216 bytes)" in answer, answer
    # Under the limit the client is told to send it.
    assert ask_first(ada, path, 1000).startswith("HTTP/1.1 100 Continue")
    assert ada.api("GET", "").status == 200


def test_a_post_without_a_body_is_answered_at_once(ada):
    # `curl -X POST` with no data sends no Content-Length; cpp-httplib read until the connection
    # ended, so the client waited out the 30 s read timeout for a 400 that named nothing.
    host, port = urllib.parse.urlsplit(ada.url).netloc.split(":")
    for method in ("POST", "PUT"):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall((f"{method} /ml/v4/trainings?version=2020-09-01 HTTP/1.1\r\nHost: {host}"
                       f"\r\nAuthorization: Bearer {ada.token}\r\n\r\n").encode())
            answer = s.recv(4096).decode()
        assert answer.startswith("HTTP/1.1 411") and "Content-Length" in answer, answer


@pytest.mark.parametrize("name", ["../evil.py", "/tmp/evil.py", "a/../../evil.py"])
def test_zip_slip_is_refused(ada, name):
    r = ada.submit_manifest(MANIFEST, code=make_zip({"train.py": "pass", name: "boom"}))
    assert r.status == 400, r
    assert r.error_targets() == ["model_definition"]
    assert "outside" in r.json()["errors"][0]["message"]


def test_zip_bomb_is_refused(ada):
    bomb = make_zip({"train.py": "pass", "zeros.bin": b"\0" * (16 << 20)})
    assert len(bomb) < 1 << 20
    r = ada.submit_manifest(MANIFEST, code=bomb)
    assert r.status == 400, r
    assert "zip bomb" in r.json()["errors"][0]["message"]


def test_not_a_zip_and_no_manifest(ada):
    r = ada.submit_manifest(MANIFEST, code=b"not a zip at all")
    assert r.status == 400 and "not a readable zip" in r.json()["errors"][0]["message"], r
    from service_helpers import multipart
    body, ctype = multipart([("other", "x", "text/plain", b"x")])
    r = ada.api("POST", "", body=body, content_type=ctype)
    assert r.status == 400 and r.error_targets() == ["manifest", "other"], r


def test_manifest_problems_are_all_reported(ada):
    r = ada.submit_manifest("name: bad\nframework: {name: pytorch-horovod}\n"
                            "execution: {compute_configuration: {name: cpu, nodes: 1}}\n"
                            "nodez: 3\n")
    assert r.status == 400, r
    targets = r.error_targets()
    assert "execution.command" in targets and "execution.compute_configuration.nodes" in targets
    assert len(targets) >= 3, r


def test_unknown_ids_and_bad_paging(ada):
    r = ada.api("GET", "/training-does-not-exist")
    assert r.status == 404 and r.error_codes() == ["training_not_found"], r
    assert ada.api("DELETE", "/training-does-not-exist").status == 404
    for query in ("?limit=-1", "?limit=abc", "?start=-5", "?state=sleeping",
                  "?limit=99999999999999999999999"):
        r = ada.api("GET", query)
        assert r.status == 400, (query, r)


def test_bytes_that_are_not_utf8_are_a_client_error_not_a_crash(ada):
    # A path or parameter with such a byte made the answer's JSON throw: a 500 with the library's
    # message, and on an unknown route (the error handler) the end of the server.
    for path in ("/ml/v4/nothing%FF?version=2020-09-01", "/ml/v4/trainings/%FF?version=2020-09-01",
                 "/ml/v4/trainings?version=2020-09-01&state=%FF",
                 "/ml/v4/trainings?version=2020-09-01&limit=%FF"):
        r = ada.request("GET", path)
        assert r.status in (400, 404), (path, r)
        assert r.json()["errors"] and "json" not in r.body, (path, r)
    r = ada.api("GET", "/" + "a" * 5000)
    assert r.status == 400 and len(r.body) < 1000, r  # the id is quoted, not echoed whole
    # A manifest that is not UTF-8 would be echoed in the training's resource.
    manifest = MANIFEST.encode().replace(b"python3 train.py", b"echo \xff")
    body, ctype = multipart([("manifest", "job.yaml", "application/x-yaml", manifest)])
    r = ada.api("POST", "", body=body, content_type=ctype)
    assert r.status == 400 and r.error_targets() == ["manifest"], r
    assert "UTF-8" in r.body, r
    assert ada.api("GET", "").status == 200


def cadre(*args, env=None):
    return subprocess.run([CADRE, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120, env=env)


def test_a_second_server_on_the_same_data_directory_is_refused(server):
    # Both would run the same queued jobs and start every deployment twice.
    other = cadre("server", "--data-dir", server.data_dir, "--listen", "127.0.0.1:0")
    assert other.returncode == 1, other.stdout
    assert "another cadre server" in other.stdout and server.data_dir in other.stdout, other.stdout
    assert f"pid {server.proc.pid}" in other.stdout, other.stdout
    assert server.client(server.add_user("ada")).api("GET", "").status == 200


def test_client_without_a_server_says_where_it_looked(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    out = cadre("jobs", "list", "--server", url, "--token", "cadre_x_y")
    assert out.returncode == 1, out.stdout
    assert url in out.stdout and "cadre server" in out.stdout, out.stdout
    out = cadre("jobs", "list", "--server", url[len("http://"):], "--token", "cadre_x_y")
    assert out.returncode == 2 and "http://HOST:PORT" in out.stdout, out.stdout


def test_a_client_waits_for_a_server_that_is_starting(tmp_path):
    # `cadre server ... &` and a client on the next line (the README's block): the client
    # waits for the server to listen rather than failing.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = str(tmp_path / "data")
    token = cadre("users", "add", "ada", "--plan", "lite", "--data-dir", data).stdout.split()[-1]
    client = subprocess.Popen([CADRE, "jobs", "list", "--server", f"http://127.0.0.1:{port}",
                               "--token", token], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    server = None
    try:
        assert "waiting up to" in client.stderr.readline()
        server = subprocess.Popen([CADRE, "server", "--data-dir", data, "--listen",
                                   f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        assert client.wait(timeout=60) == 0, client.stderr.read()
    finally:
        client.kill()
        if server:
            server.kill()
            server.wait(timeout=60)


def test_submit_of_a_folder_asks_for_its_manifest(tmp_path):
    (tmp_path / "job.yaml").write_text(MANIFEST)
    out = cadre("submit", str(tmp_path), "--token", "cadre_x_y")
    # It used to upload the folder's parent with the folder read as a manifest.
    assert out.returncode == 2 and "is a folder" in out.stdout, out.stdout


@pytest.mark.parametrize("method, path, bad", [
    ("GET", "/ml/v4/trainings/../../etc/logs", "../../etc"),
    ("GET", "/ml/v4/trainings/..", ".."),
    ("DELETE", "/ml/v4/trainings/training-1/../../y", "training-1/../../y"),
    ("GET", "/ml/v4/trainings/a%20b", "a b"),
    ("GET", "/ml/v4/trainings/..%2F..%2Fetc/logs", "../../etc"),
    ("GET", "/ml/v4/models/../x/download", "../x"),
    ("POST", "/ml/v4/deployments/../predictions", ".."),
])
def test_a_path_like_id_is_refused_naming_it(ada, method, path, bad):
    # It used to be "no route" (an id with a slash) or "does not exist": unclear, and the same
    # answer as for a real id of someone else's.
    sep = "&" if "?" in path else "?"
    r = ada.request(method, f"{path}{sep}version=2020-09-01",
                    body="{}" if method == "POST" else None,
                    content_type="application/json" if method == "POST" else None)
    assert r.status == 400 and r.error_codes() == ["invalid_parameter"], r
    kind = path.split("/")[3][:-1]
    assert f"'{bad}' is not a {kind} id" in r.json()["errors"][0]["message"], r
    assert r.error_targets() == ["id"], r
    assert ada.api("GET", "").status == 200  # and the server carries on


@pytest.mark.parametrize("args, bad, kind", [
    (["jobs", "logs", "../../etc"], "../../etc", "training"),
    (["jobs", "logs", "-f", ".."], "..", "training"),
    (["jobs", "get", "a/b"], "a/b", "training"),
    (["jobs", "cancel", "../x", "--hard-delete"], "../x", "training"),
    (["deploy", "x y"], "x y", "training"),
    (["score", "../d", "-"], "../d", "deployment"),
])
def test_the_client_names_a_malformed_id_before_asking(ada, args, bad, kind):
    out = cadre(*args, "--server", ada.url, "--token", ada.token)
    assert out.returncode == 2, out.stdout
    assert f"'{bad}' is not a {kind} id" in out.stdout, out.stdout


@pytest.mark.parametrize("flag, value, words", [
    ("--threads", "2", "--threads must be 4..1024, got 2"),
    ("--threads", "100000", "--threads must be 4..1024, got 100000"),  # that many threads
    ("--grace", "1e300", "--grace must be 0..86400, got 1e+300"),      # overflowed
    ("--max-code-mib", "-5", "--max-code-mib must be 1..1048576, got -5"),  # was taken for 1
    ("--max-prediction-mib", "0", "--max-prediction-mib must be 1..4096, got 0"),
])
def test_a_server_flag_out_of_range_is_named(tmp_path, flag, value, words):
    out = cadre("server", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0", flag, value)
    assert out.returncode == 2, out.stdout
    assert out.stdout == f"cadre server: {words}\n", out.stdout


@pytest.mark.parametrize("parts, message, target", [
    # A misspelled part was ignored: the job ran without its code.
    ([("manifest", "job.yaml"), ("model_defintion", "code.zip")],
     "'model_defintion': unknown part (did you mean 'model_definition'?)", "model_defintion"),
    ([("manifest", "job.yaml"), ("notes", "notes.txt")],
     "'notes': unknown part (the parts are 'manifest' and 'model_definition')", "notes"),
    # The second was ignored.
    ([("manifest", "job.yaml"), ("manifest", "other.yaml")],
     "manifest: sent 2 times; send one", "manifest"),
])
def test_an_unknown_or_repeated_part_is_refused_naming_it(ada, parts, message, target):
    contents = {"job.yaml": MANIFEST.encode(), "other.yaml": MANIFEST.encode(),
                "code.zip": make_zip({"train.py": "print('hi')\n"}), "notes.txt": b"hi"}
    body, ctype = multipart([(name, file, "application/octet-stream", contents[file])
                             for name, file in parts])
    r = ada.api("POST", "", body=body, content_type=ctype)
    assert r.status == 400, r
    assert [e["message"] for e in r.json()["errors"]] == [message], r
    assert r.error_targets() == [target], r
    assert ada.api("GET", "").json()["total_count"] == 0  # nothing was submitted


@pytest.mark.parametrize("ctype, body", [
    ("multipart/form-data", b"xx"),  # no boundary
    ("multipart/form-data; boundary=XYZ", b"garbage"),
    ("multipart/form-data; boundary=XYZ",  # never closed
     b'--XYZ\r\nContent-Disposition: form-data; name="manifest"; filename="a"\r\n\r\nname: x\r\n'),
])
def test_a_multipart_body_that_cannot_be_split_says_so(ada, ctype, body):
    # It was "a malformed request line or header?", about a request whose line and headers
    # were fine.
    r = ada.api("POST", "", body=body, content_type=ctype)
    assert r.status == 400 and r.error_codes() == ["invalid_multipart"], r
    assert "multipart/form-data body could not be read" in r.body, r
    assert ada.api("GET", "").status == 200


def test_a_job_too_large_for_its_runner_is_refused_at_submission(ada):
    # Accepted (201), it failed at once: its runner reads at most 1 MiB of a manifest, and the
    # failure blamed a runner "killed or the machine restarted".
    r = ada.submit_json(wml_body("echo " + "a" * (3 << 20)))
    assert r.status == 400 and r.error_targets() == ["model_definition.command"], r
    assert "belongs in a script" in r.body, r
    manifest = MANIFEST.replace("python3 train.py", "echo " + "a" * (2 << 20))
    r = ada.submit_manifest(manifest)
    assert r.status == 400 and r.error_targets() == ["manifest"], r
    assert "larger than 1 MiB" in r.body, r
    assert ada.api("GET", "").json()["total_count"] == 0
