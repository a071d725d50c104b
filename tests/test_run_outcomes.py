"""`cadre run` outcomes: bad manifests stop before anything starts, a failing slot stops the
job with a summary, SIGTERM to the runner leaves no process behind."""
import os
import signal
import subprocess
import textwrap
import time
import json
import uuid

import pytest

from runner_helpers import CADRE

BAD_MANIFESTS = [
    # (manifest, [(field path, words in its message)])
    ("framework: {name: pytorch-horovd}\nexecution: {command: x, compute_configuration: "
     "{name: k80x2, nodes: 2}}\n",
     [("framework.name", "did you mean 'pytorch-horovod'"),
      ("framework.name", "valid: pytorch, pytorch-ddl, pytorch-horovod")]),
    ("framework: {name: pytorch-ddl}\nexecution: {command: x, compute_configuration: "
     "{name: k80x3, nodes: 2}}\n",
     [("execution.compute_configuration.name", "unknown compute configuration 'k80x3'"),
      ("execution.compute_configuration.name", "k80, k80x2, k80x4")]),
    ("framework: {name: pytorch, version: '1.4'}\nexecution: {command: x}\n",
     [("framework.version", "'1.4' does not match the installed torch 1.13")]),
    ("framework: {name: pytorch-horovod}\nexecution: {command: x, compute_configuration: "
     "{name: k80, nodes: 1}}\n",
     [("execution.compute_configuration.nodes", "needs at least 2 learners, got 1")]),
    ("framework: {name: pytorch}\nexecution: {compute_configuration: {name: cpu, nodes: 2}}\n",
     [("execution.command", "missing")]),
    ("framework: {name: pytorch}\nexecution: {command: x, comand: y}\n",
     [("execution.comand", "unknown key (did you mean 'command'?)")]),
    ("framework: {name: pytorch}\nexecution: {command: x, compute_configuration: "
     "{name: cpu, nodes: many}}\n",
     [("execution.compute_configuration.nodes", "expected an integer, got 'many'")]),
    ("framework: {name: pytorch}\nexecution: {command: x, compute_configuration: "
     "{name: cpu, nodes: 3}}\nparameter_servers: 3\n",
     [("parameter_servers", "3 parameter servers need more than 3 learners")]),
]


@pytest.mark.parametrize("manifest,expected", BAD_MANIFESTS)
def test_bad_manifest_is_reported_and_nothing_starts(cadre_run, tmp_path, manifest, expected):
    (tmp_path / "job.yaml").write_text(manifest)
    job = cadre_run("job.yaml")
    assert job.returncode == 2, job.stderr
    assert "nothing was started" in job.stderr
    for path, words in expected:
        assert any(line.strip().startswith(path + ":") and words in line
                   for line in job.stderr.splitlines()), (path, words, job.stderr)
    assert not (tmp_path / "runs").exists()


def test_all_problems_at_once_including_flags(cadre_run, tmp_path):
    (tmp_path / "job.yaml").write_text(
        "framework: {name: caffe}\nexecution: {compute_configuration: {name: tpu}}\nzz: 1\n")
    job = cadre_run("job.yaml", "--grace", "-1")
    assert job.returncode == 2
    for path in ("framework.name:", "execution.compute_configuration.name:", "execution.command:",
                 "zz:", "--grace:"):
        assert path in job.stderr, job.stderr
    assert "5 problems" in job.stderr
    missing = cadre_run("nowhere.yaml")
    assert missing.returncode == 2 and "manifest: cannot read nowhere.yaml" in missing.stderr
    # A flags-only job's default of one learner is named by its flag.
    one = cadre_run("--framework", "pytorch-horovod", "--", "true")
    assert one.returncode == 2
    assert "--nodes: framework 'pytorch-horovod' is distributed and needs at least 2" in one.stderr
    no_command = cadre_run("-n", "2")
    assert no_command.returncode == 2
    assert "command (after --): missing" in no_command.stderr
    both = cadre_run("job.yaml", "python3")
    assert both.returncode == 2 and "give either a manifest or a command" in both.stderr
    bad_python = cadre_run("--", "true", env={"CADRE_PYTHON": "/nonexistent/python3"})
    assert bad_python.returncode == 2
    assert "CADRE_PYTHON: '/nonexistent/python3' is not an executable" in bad_python.stderr


def test_a_manifest_in_json_or_upper_case_is_read_not_run(cadre_run, tmp_path):
    # Only .yaml/.yml were manifests: `cadre run job.json` ran "job.json" as every learner's
    # command ("exec: job.json: not found").
    manifest = {"framework": {"name": "pytorch"}, "execution": {"command": "echo from-manifest"}}
    (tmp_path / "job.json").write_text(json.dumps(manifest))
    (tmp_path / "JOB.YAML").write_text("framework: {name: pytorch}\n"
                                       "execution: {command: echo from-manifest}\n")
    for name in ("job.json", "JOB.YAML"):
        job = cadre_run("-q", "--results-dir", "runs-" + name, name)
        assert job.returncode == 0, (name, job.stderr)
        (job_dir,) = list((tmp_path / ("runs-" + name)).iterdir())
        assert (job_dir / "learner-1" / "slot-0.log").read_text() == "from-manifest\n"


def run_bytes(args, cwd):
    """`cadre run ARGS` with the output as bytes (it may hold anything a manifest held)."""
    env = dict(os.environ)
    env.pop("CADRE_HOSTS_METHOD", None)
    return subprocess.run([CADRE, "run", *args], cwd=cwd, env=env, timeout=60,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_binary_manifest_is_reported_escaped(tmp_path):
    # YAML's parser names the byte it stopped at ("unknown escape character"), and a file that
    # reads as one scalar was echoed whole: raw bytes and terminal escapes on the user's console.
    cases = {"escape.yaml": b'name: "a\\\xc9\x1b[2J"\n',
             "scalar.yaml": bytes(range(1, 32)) * 40 + b"\xff\x9b",
             "key.yaml": b"framework: {name: pytorch}\nexecution: {command: x}\n\x1b]0;hi\x07: 1\n"}
    for name, text in cases.items():
        (tmp_path / name).write_bytes(text)
        proc = run_bytes([name], tmp_path)
        assert proc.returncode == 2, (name, proc.stderr)
        assert b"nothing was started" in proc.stderr
        assert all(c in b"\n" or 0x20 <= c < 0x7f for c in proc.stderr), (name, proc.stderr)
        assert len(proc.stderr) < 1000, (name, proc.stderr)
    assert not (tmp_path / "runs").exists()


def test_an_argument_that_is_not_utf8_runs_and_is_recorded(tmp_path):
    # A command's argument (a file name) may be any bytes; status.json's JSON writer once threw
    # on them and the runner stopped before starting the job, with no status.json.
    proc = run_bytes(["-q", "--", "sh", "-c", 'printf "%s\\n" "$1"', "sh", b"caf\xe9"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    (job_dir,) = list((tmp_path / "runs").iterdir())
    assert (job_dir / "learner-1" / "slot-0.log").read_bytes() == b"caf\xe9\n"
    status = json.loads((job_dir / "status.json").read_text())
    assert status["state"] == "completed" and "caf\ufffd" in status["command"]


@pytest.mark.parametrize("backend", [["slurm"], ["mpi", "--hostfile", "/dev/null"],
                                     ["kubernetes", "--image", "img"]])
def test_restarts_on_a_cluster_engine_are_refused_by_name(cadre_run, backend):
    # Before, the runner found this after the job's checks: exit code 1, no field named.
    job = cadre_run("--backend", *backend, "-n", "2", "--max-restarts", "2", "--", "true")
    assert job.returncode == 2, job.stderr
    assert "--max-restarts: the %s backend runs a job once" % backend[0] in job.stderr, job.stderr
    assert "nothing was started" in job.stderr


def test_a_time_limit_in_no_form_of_sbatchs_is_refused_saying_the_forms(cadre_run):
    # Slurm's own forms (1:00:00, 2-0, ...) are taken; "1h" is none of them.
    job = cadre_run("--backend", "slurm", "--time-limit", "1h", "--", "true")
    assert job.returncode == 2, job.stderr
    assert "--time-limit: '1h' is not a time limit" in job.stderr, job.stderr
    assert "hours:minutes:seconds" in job.stderr and "nothing was started" in job.stderr


@pytest.mark.parametrize("flag,value", [("--queue-timeout", "nan"), ("--queue-timeout", "inf"),
                                        ("--queue-timeout", "1e300"), ("--queue-timeout", "-1"),
                                        ("--time-limit", "-5")])
def test_a_backend_limit_out_of_range_is_refused_by_name(cadre_run, flag, value):
    # "nan" once passed the negative check and became an undefined number of seconds.
    job = cadre_run("--backend", "slurm", flag, value, "--", "true")
    assert job.returncode == 2, job.stderr
    assert any(line.strip().startswith(flag + ": must be 0") for line in job.stderr.splitlines()), \
        job.stderr
    assert "nothing was started" in job.stderr


@pytest.mark.parametrize("backend,flag,value,engines", [
    ("local", "--hostfile", "hosts.txt", "mpi"),
    ("local", "--partition", "debug", "slurm"),
    ("mpi", "--time-limit", "5", "slurm"),
    ("local", "--store-host", "10.0.0.1", "slurm or mpi"),
    ("mpi", "--queue-timeout", "30", "slurm or kubernetes"),
    # 0 was also "not given", so --queue-timeout 0 was ignored where it means nothing.
    ("local", "--queue-timeout", "0", "slurm or kubernetes"),
    ("slurm", "--namespace", "team-a", "kubernetes"),
])
def test_a_flag_of_another_engine_is_refused_not_ignored(cadre_run, backend, flag, value, engines):
    job = cadre_run("--backend", backend, flag, value, "--", "true")
    assert job.returncode == 2, job.stderr
    assert f"{flag}: is for --backend {engines}, not {backend}" in job.stderr, job.stderr
    assert "nothing was started" in job.stderr


@pytest.mark.parametrize("partition", ["debug\nhostname", "two words", "tab\there"])
def test_a_partition_that_would_break_the_batch_script_is_refused(cadre_run, partition):
    # The partition is written into the batch script as a line of its own; a newline in it once
    # added a command to that script.
    job = cadre_run("--backend", "slurm", "--partition", partition, "--", "true")
    assert job.returncode == 2, job.stderr
    assert "--partition: " in job.stderr and "is not a Slurm partition name" in job.stderr, \
        job.stderr
    assert "nothing was started" in job.stderr


@pytest.mark.parametrize("args,line", [
    (["-n", "3", "--framework", "pytorch", "--results", "out", "--", "python3", "launcher.py",
      "ps_train.py", "--max-batches", "30"],
     "cadre run: unknown option --results (did you mean --results-dir?)"),
    (["--results=out", "--", "true"],
     "cadre run: unknown option --results (did you mean --results-dir?)"),
    (["-n", "2", "python3", "train.py", "--epochs", "3"],
     "cadre run: unknown option --epochs; the learners' command and its own options go after --"),
    (["-qx", "--", "true"], "cadre run: unknown option -x"),
])
def test_an_unknown_option_is_named_in_one_line(cadre_run, tmp_path, args, line):
    # CLI11 listed every leftover word in reverse ("1 --epochs 30 --max-batches ...") without
    # saying which one was the mistake.
    job = cadre_run(*args)
    assert job.returncode == 2, job.stderr
    assert job.stderr.splitlines() == [line], job.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,line", [
    (["server", "--slot", "3"], "cadre server: unknown option --slot (did you mean --slots?)"),
    # Named before the required --ranks is missed.
    (["bench", "allreduce", "--sizez", "3"],
     "cadre bench allreduce: unknown option --sizez (did you mean --sizes?)"),
    (["version", "--frobnicate"], "cadre version: unknown option --frobnicate"),
])
def test_an_unknown_option_of_any_subcommand_is_named_with_it(tmp_path, args, line):
    proc = subprocess.run([CADRE, *args], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [line], proc.stderr
    assert list(tmp_path.iterdir()) == []  # no server data directory, nothing run


@pytest.mark.parametrize("args,flag", [
    (["--parameter-servers", ""], "--parameter-servers"),
    (["--parameter-servers="], "--parameter-servers"),
    (["-n", ""], "-n"),
    (["-qn", ""], "-n"),
    (["--max-restarts", ""], "--max-restarts"),
    (["--grace", ""], "--grace"),
    (["--queue-timeout", ""], "--queue-timeout"),
])
def test_an_empty_number_is_refused_naming_the_flag(cadre_run, tmp_path, args, flag):
    # CLI11 reads an empty value as no value: --parameter-servers '' quietly ran with 1.
    job = cadre_run(*args, "--", "true")
    assert job.returncode == 2, job.stderr
    assert job.stderr.splitlines() == [
        f"cadre run: {flag} was given an empty value; it takes a number"], job.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("flag", ["-o", "--output-dir=", "--results-dir", "--data-dir"])
def test_an_empty_folder_is_refused_naming_the_flag(cadre_run, tmp_path, flag):
    # -o '' was an unnamed filesystem error (exit 1); --results-dir '' put the job directory in
    # the working directory itself; --data-dir '' was no data folder at all.
    job = cadre_run(*([flag] if flag.endswith("=") else [flag, ""]), "--", "true")
    assert job.returncode == 2, job.stderr
    assert job.stderr.splitlines() == [
        f"cadre run: {flag.rstrip('=')} was given an empty value; it takes a folder"], job.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [[""], ["--", "", "x"]])
def test_an_empty_program_is_refused_before_any_learner_starts(cadre_run, tmp_path, args):
    job = cadre_run(*args)
    assert job.returncode == 2, job.stderr
    assert "command (after --): the program to run is an empty word" in job.stderr, job.stderr
    assert "nothing was started" in job.stderr and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args,line", [
    (["server", "--slots", ""], "cadre server: --slots was given an empty value; it takes a number"),
    (["server", "--data-dir", ""],
     "cadre server: --data-dir was given an empty value; it takes a folder"),
    (["users", "add", "ada", "--plan", "lite", "--data-dir="],
     "cadre users add: --data-dir was given an empty value; it takes a folder"),
    (["deploy", "training-1", "--timeout="],
     "cadre deploy: --timeout was given an empty value; it takes a number"),
])
def test_an_empty_number_of_another_subcommand_is_refused_naming_it(tmp_path, args, line):
    proc = subprocess.run([CADRE, *args], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [line], proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_failing_slot_stops_the_job_with_a_summary(cadre_run):
    # Rank 3 fails once the others are ready; they would run for a minute, and rank 0 even
    # ignores SIGTERM.
    script = ('ready() { i=0; while [ ! -e "$RESULT_DIR/ready-$1" ] && [ $i -lt 600 ]; do '
              'sleep 0.05; i=$((i+1)); done; }; '
              'if [ "$CADRE_RANK" = 3 ]; then ready 0; ready 1; ready 2; '
              'echo step 1; echo "oops: bad input" >&2; exit 3; fi; '
              'if [ "$CADRE_RANK" = 0 ]; then trap "" TERM; fi; '
              'touch "$RESULT_DIR/ready-$CADRE_RANK"; '
              'if [ "$CADRE_RANK" = 0 ]; then while :; do sleep 0.1; done; fi; sleep 60')
    start = time.monotonic()
    job = cadre_run("-n", "2", "--compute", "cpux2", "--framework", "pytorch-horovod",
                    "--grace", "1", "--", "sh", "-c", script)
    assert time.monotonic() - start < 30
    assert job.returncode == 1
    assert "failed: learner-2 slot 1 exited with code 3" in job.stderr
    assert "last lines of" in job.stderr and "learner-2/slot-1.log" in job.stderr
    assert "    step 1\n    oops: bad input\n" in job.stderr
    status = job.status()
    assert status["state"] == "failed" and status["exit_code"] == 1
    assert status["failed_slot"] == {"learner_id": 2, "local_rank": 1}
    slots = {s["rank"]: s for l in status["learners"] for s in l["slots"]}
    assert slots[3]["exit_code"] == 3 and not slots[3]["stopped_by_runner"]
    assert slots[0]["signal"] == "SIGKILL"  # ignored SIGTERM, killed after the grace period
    assert slots[1]["signal"] == "SIGTERM" and slots[1]["stopped_by_runner"]
    assert slots[1]["state"] == "stopped" and slots[3]["state"] == "failed"


def test_killed_slot_is_named_by_signal(cadre_run):
    job = cadre_run("-n", "2", "--framework", "pytorch", "--", "sh", "-c",
                    'if [ "$LEARNER_ID" = 2 ]; then kill -SEGV $$; fi; sleep 60')
    assert job.returncode == 1
    assert "learner-2 slot 0 was killed by SIGSEGV" in job.stderr
    assert "(no output)" in job.stderr


def test_a_stopped_python_learner_keeps_what_it_printed(tmp_path):
    # Python buffers print() into a pipe and SIGTERM ends it without flushing: learner 1, stopped
    # because learner 2 failed, once lost every line it had printed (here with no
    # PYTHONUNBUFFERED in the user's environment, as on most machines).
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    env.pop("CADRE_HOSTS_METHOD", None)
    # Learner 2 fails once learner 1's line is in its log, or after 10 s.
    script = ("import os, sys, time\n"
              "print('hello from', os.environ['LEARNER_ID'])\n"
              "if os.environ['LEARNER_ID'] == '2':\n"
              "    log = os.path.join(os.environ['RESULT_DIR'], 'learner-1', 'slot-0.log')\n"
              "    for _ in range(200):\n"
              "        if os.path.getsize(log) > 0:\n"
              "            break\n"
              "        time.sleep(0.05)\n"
              "    sys.exit(3)\n"
              "time.sleep(60)\n")
    proc = subprocess.run([CADRE, "run", "-n", "2", "--framework", "pytorch-horovod", "--grace",
                           "5", "--", "python3", "-c", script], cwd=tmp_path, env=env,
                          timeout=60, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "[learner-1/0] hello from 1" in proc.stdout, proc.stdout
    (job_dir,) = list((tmp_path / "runs").iterdir())
    assert (job_dir / "learner-1" / "slot-0.log").read_text() == "hello from 1\n"


def test_a_killed_command_under_the_manifests_shell_is_named_by_signal(cadre_run, tmp_path):
    # A manifest's command runs under /bin/sh -c, which (dash) waits for its program: a program
    # killed by SIGKILL showed only as "exited with code 137".
    (tmp_path / "job.yaml").write_text(
        "framework: {name: pytorch}\nexecution: {command: \"sh -c 'kill -KILL $$'\"}\n")
    job = cadre_run("job.yaml")
    assert job.returncode == 1, job.stderr
    assert ("learner-1 slot 0 exited with code 137 (what a shell returns when its command is "
            "killed by SIGKILL)") in job.stderr, job.stderr


def test_parameter_servers_stopped_after_the_workers_are_named(cadre_run):
    # A flags-only job is PS mode: learner 1 serves, and is stopped once the workers finish.
    # That once happened without a word, so a script started this way by mistake lost learner 1
    # in a job reported as completed.
    job = cadre_run("-n", "2", "--", "sh", "-c",
                    '[ "$CADRE_ROLE" = ps ] && exec sleep 60; echo worker done')
    assert job.returncode == 0, job.stderr
    assert "cadre: every worker has finished; stopping the parameter servers (learner-1 slot 0)" \
        in job.stderr, job.stderr
    slots = [s for l in job.status()["learners"] for s in l["slots"]]
    assert slots[0]["stopped_by_runner"] and slots[0]["signal"] == "SIGTERM", slots


def processes_with(marker):
    """pids whose command line mentions marker."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGQUIT])
def test_a_stop_signal_stops_everything_and_leaves_no_orphans(tmp_path, sig):
    # SIGQUIT (Ctrl-\) once dumped the runner's core, leaving status.json "running".
    name = signal.Signals(sig).name
    # A unique duration marks our sleeps: "300.<random digits>".
    marker = "300." + str(uuid.uuid4().int)[:12]
    # Each slot starts a grandchild in its own session (escaping the process group) and one in
    # the background, then waits; the marker in their command lines finds them in /proc.
    script = textwrap.dedent(f"""
        setsid sleep 300 {marker} &
        sleep 300 {marker} &
        touch "$RESULT_DIR/started-$CADRE_RANK"
        wait
    """)
    proc = subprocess.Popen([CADRE, "run", "-n", "2", "--compute", "cpux2", "--framework",
                             "pytorch-horovod", "--grace", "2", "--", "sh", "-c", script],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            runs = tmp_path / "runs"
            started = list(runs.glob("*/started-*")) if runs.exists() else []
            if len(started) == 4 and len(processes_with(marker)) >= 8:
                break
            assert time.monotonic() < deadline, "slots did not start"
            time.sleep(0.05)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, err
    assert "stopping job" in err and f"stopped: stopped by {name}" in err
    deadline = time.monotonic() + 5
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker) == []
    (job_dir,) = list((tmp_path / "runs").iterdir())
    status = json.loads((job_dir / "status.json").read_text())
    assert status["state"] == "stopped" and status["failure"] == f"stopped by {name}"
    assert all(s["stopped_by_runner"] for l in status["learners"] for s in l["slots"])


def test_learners_die_with_a_killed_runner(tmp_path):
    """SIGKILL gives the runner no chance to clean up: each slot's keeper sees it die and takes
    the slot's process group down, including the command's own children."""
    marker = "300." + str(uuid.uuid4().int)[:12]
    script = f'sleep {marker} & touch "$RESULT_DIR/started-$CADRE_RANK"; wait'
    proc = subprocess.Popen([CADRE, "run", "-q", "-n", "2", "--compute", "cpux2", "--framework",
                             "pytorch-ddl", "--", "sh", "-c", script],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("runs/*/started-*"))) < 4:
            assert time.monotonic() < deadline, "slots did not start"
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker) == []
