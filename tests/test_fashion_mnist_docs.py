"""examples/fashion_mnist/README.md against the scripts it describes: the DDL diff is the
script's (its hunks at the lines they name), and FASHION_MNIST_MAX_BATCHES shortens every
example, as the README says, without editing a manifest; docs/ps.md's flags-only command runs
the example as written."""
import glob
import os
import re
import shlex
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
EXAMPLES = os.path.join(ROOT, "examples", "fashion_mnist")
BUILD = os.environ.get("CADRE_BUILD_DIR", os.path.join(ROOT, "build"))


def readme():
    return open(os.path.join(EXAMPLES, "README.md")).read()


def test_the_ddl_diff_is_the_scripts():
    diff = re.search(r"```diff\n(.*?)```", readme(), re.S).group(1).splitlines()
    script = open(os.path.join(EXAMPLES, "train_ddl.py")).read().splitlines()
    hunks = 0
    for i, line in enumerate(diff):
        header = re.match(r"@@ -\d+,\d+ \+(\d+),(\d+) @@", line)
        if not header:
            continue
        hunks += 1
        start, count = int(header.group(1)), int(header.group(2))
        body = []
        for hunk_line in diff[i + 1:]:
            if hunk_line.startswith("@@"):
                break
            if not hunk_line.startswith("-"):
                body.append(hunk_line[1:])
        assert body == script[start - 1:start - 1 + count], line
    assert hunks >= 4


@pytest.mark.parametrize("script", ["train_horovod.py", "train_ddl.py", "train_elastic.py",
                                    "ps_train.py"])
@pytest.mark.parametrize("value,expected", [("7", "max_batches=7"), (None, "max_batches=0")])
def test_max_batches_comes_from_the_environment(script, value, expected):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(BUILD, "python"), os.path.join(ROOT, "python")]))
    env.pop("FASHION_MNIST_MAX_BATCHES", None)
    if value is not None:
        env["FASHION_MNIST_MAX_BATCHES"] = value
    code = ("import sys; sys.argv = ['x']; import %s as s; "
            "print('max_batches=%%d' %% s.parser.parse_args([]).max_batches)" % script[:-3])
    proc = subprocess.run(["/usr/bin/python3", "-c", code], cwd=EXAMPLES, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == expected


def test_a_bad_max_batches_in_the_environment_is_named():
    env = dict(os.environ, FASHION_MNIST_MAX_BATCHES="many", PYTHONPATH=os.pathsep.join(
        [os.path.join(BUILD, "python"), os.path.join(ROOT, "python")]))
    proc = subprocess.run(["/usr/bin/python3", "train_ddl.py"], cwd=EXAMPLES, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "--max-batches: invalid int value: 'many'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_ps_doc_command_runs_as_written(tmp_path):
    # It was `... -- python3 launcher.py train.py`, which no folder of the checkout runs.
    text = open(os.path.join(ROOT, "docs", "ps.md")).read()
    block = re.search(r"^```\n(.*?)^```", text, re.S | re.M).group(1).replace("\\\n", " ")
    line = [l for l in block.splitlines() if l.startswith("cadre run -n")][0]
    words = shlex.split(line, comments=True)
    assert words[:2] == ["cadre", "run"], words
    job = tmp_path / "job"
    argv = [os.path.join(BUILD, "cadre"), "run", "-q", "-o", str(job)] + words[2:]
    env = dict(os.environ, FASHION_MNIST_MAX_BATCHES="5")
    env.pop("CADRE_HOSTS_METHOD", None)
    proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    logs = {os.path.relpath(p, job): open(p).read()
            for p in glob.glob(str(job / "learner-*" / "slot-0.log"))}
    assert len(logs) == 4, logs.keys()
    assert "parameter server 2 of 2" in logs[os.path.join("learner-2", "slot-0.log")]
    # Learners 3 and 4 are workers 0 and 1; worker 0 tests the model the servers trained.
    assert re.search(r"^test accuracy .* sync mode, 2 workers$",
                     logs[os.path.join("learner-3", "slot-0.log")], re.M), logs
