"""The dashboard in a real browser: Debian's chromium, headless, driven by puppeteer-core
(installed by scripts/install-deps). It signs in, sees a job's log lines arrive while it runs,
carries on through a restart of the server (SIGKILL) and sees the job complete with its loss
curve drawn, and cancels another job. The screenshot is kept as a test artifact in
<build>/test-artifacts/dashboard.png."""
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from service_helpers import BUILD, CADRE, wait_for, wml_body

HERE = os.path.dirname(os.path.abspath(__file__))
DEPS = os.environ.get("CADRE_BROWSER_DEPS", os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cadre", "browser-test"))

TRAIN = ("import time, os, cadre\n"
         "for epoch in range(1, 4):\n"
         "    cadre.log_metrics(epoch, loss=1.0 / epoch, accuracy=0.2 * epoch)\n"
         "    print(f'epoch {epoch} done', flush=True)\n"
         "for _ in range(1200):\n"
         "    if os.path.exists('release'):\n"
         "        break\n"
         "    time.sleep(0.1)\n"
         "print('training finished', flush=True)\n")


def browser():
    """chromium and node, with puppeteer-core in DEPS."""
    chromium = shutil.which("chromium")
    node = shutil.which("node")
    if not (chromium and node and os.path.isdir(os.path.join(DEPS, "node_modules",
                                                             "puppeteer-core"))):
        pytest.fail(f"the browser test needs chromium, node and puppeteer-core in {DEPS}: "
                    "run scripts/install-deps")
    return chromium, node


def test_dashboard_shows_names_as_text_and_says_when_a_token_is_revoked(make_server, tmp_path):
    chromium, node = browser()
    server = make_server(slots=2)
    token = server.add_user("ada")
    name = '<img src=x onerror="window.injected=1">'
    r = server.client(token).submit_json(wml_body("true", name=name))
    assert r.status == 201, r
    signed_in = tmp_path / "signed-in"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "deps": DEPS, "chromium": chromium, "url": server.url + "/", "token": token,
        "revoked": {"job": r.json()["metadata"]["id"], "name": name,
                    "signed_in": str(signed_in)},
        "screenshot": str(tmp_path / "revoked.png")}))
    check = subprocess.Popen([node, os.path.join(HERE, "browser", "dashboard_check.cjs"),
                              str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    try:
        wait_for("the dashboard to sign in", lambda: signed_in.exists() or check.poll() is not None,
                 timeout=300)
        revoke = subprocess.run([CADRE, "users", "revoke", "ada", "--data-dir",
                                 str(server.data_dir)], capture_output=True, text=True, timeout=60)
        assert revoke.returncode == 0, revoke.stderr
        out, _ = check.communicate(timeout=300)
    finally:
        if check.poll() is None:
            check.kill()
    assert check.returncode == 0, out


def test_dashboard_pages_through_older_trainings(make_server, tmp_path):
    chromium, node = browser()
    server = make_server(slots=2)
    token = server.add_user("ada")
    ada = server.client(token)
    ids = []
    for i in range(5):
        r = ada.submit_json(wml_body("true", name=f"job-{i}"))
        assert r.status == 201, r
        ids.insert(0, r.json()["metadata"]["id"])  # newest first, as the list shows them
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "deps": DEPS, "chromium": chromium, "url": server.url + "/", "token": token,
        "paging": {"ids": ids}, "screenshot": str(tmp_path / "paging.png")}))
    check = subprocess.run([node, os.path.join(HERE, "browser", "dashboard_check.cjs"),
                            str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=400)
    assert check.returncode == 0, check.stdout


def test_dashboard_deploys_a_model_and_deletes_the_deployment(make_server, tmp_path):
    from deployment_helpers import GARBAGE, TINY, deploy, ml, model_of, train, \
        wait_deployment
    chromium, node = browser()
    server = make_server(slots=2)
    token = server.add_user("ada")
    ada = server.client(token)
    tiny_t, garbage_t = train(ada, TINY, GARBAGE)
    model = model_of(ada, tiny_t)["metadata"]["id"]
    failed = deploy(ada, model_of(ada, garbage_t)["metadata"]["id"], "broken")
    assert wait_deployment(ada, failed, ("ready", "failed"))["status"]["state"] == "failed"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "deps": DEPS, "chromium": chromium, "url": server.url + "/", "token": token,
        "deployments": {"training": tiny_t, "model": model, "failed": failed},
        "screenshot": str(tmp_path / "deployments.png")}))
    check = subprocess.run([node, os.path.join(HERE, "browser", "dashboard_check.cjs"),
                            str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=400)
    assert check.returncode == 0, check.stdout
    (deployed,) = [line.split()[1] for line in check.stdout.splitlines()
                   if line.startswith("deployed ")]
    assert ml(ada, "GET", f"deployments/{deployed}").status == 404
    assert [d["metadata"]["id"] for d in ml(ada, "GET", "deployments").json()["resources"]] \
        == [failed]


def test_dashboard_in_headless_chromium(make_server, tmp_path):
    chromium, node = browser()
    server = make_server(slots=2)
    token = server.add_user("ada")
    ada = server.client(token)
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    job = ada.submit_json(wml_body(f"python3 {code / 'train.py'}", name="dashboard-job"))
    assert job.status == 201, job
    job_id = job.json()["metadata"]["id"]
    hold = ada.submit_json(wml_body("exec sleep 600", name="to-cancel"))
    assert hold.status == 201, hold

    artifacts = os.path.join(BUILD, "test-artifacts")
    os.makedirs(artifacts, exist_ok=True)
    screenshot = os.path.join(artifacts, "dashboard.png")
    if os.path.exists(screenshot):
        os.remove(screenshot)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "deps": DEPS, "chromium": chromium, "url": server.url + "/", "token": token,
        "job": job_id, "release": os.path.join(server.data_dir, "trainings", job_id, "model", "release"),
        "hold": hold.json()["metadata"]["id"], "screenshot": screenshot,
        "restart": str(tmp_path / "restart"), "restarted": str(tmp_path / "restarted")}))
    check = subprocess.Popen([node, os.path.join(HERE, "browser", "dashboard_check.cjs"),
                              str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    try:
        # The page used to stop updating when a request failed: the job stayed `running` there.
        wait_for("the check to ask for a restart",
                 lambda: (tmp_path / "restart").exists() or check.poll() is not None, timeout=300)
        if check.poll() is None:
            server.kill(signal.SIGKILL)
            time.sleep(3)  # the page's requests fail meanwhile
            server.start(same_port=True)
            (tmp_path / "restarted").write_text("")
        out, _ = check.communicate(timeout=400)
    finally:
        check.kill()
    assert check.returncode == 0, out
    assert os.path.getsize(screenshot) > 1000
