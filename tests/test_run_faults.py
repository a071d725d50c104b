"""`cadre run` never harms its host: a slot that cannot start kills nobody, the job directory is
never someone else's, files are not written through planted symlinks."""
import json
import os
import re
import shutil
import subprocess

import pytest

from runner_helpers import CADRE


def run_shell(script, cwd, timeout=120):
    """Runs a shell script in its own session (so that a runner signalling its own process group
    would kill the script, not pytest); returns the CompletedProcess."""
    env = dict(os.environ, CADRE=CADRE)
    env.pop("CADRE_HOSTS_METHOD", None)
    return subprocess.run(["sh", "-c", script], cwd=cwd, env=env, timeout=timeout,
                          start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def test_a_slot_that_cannot_start_kills_nobody(tmp_path):
    # Too few file descriptors for 12 learners' pipes and logs: some slots never get a pid.
    # The runner once sent SIGKILL to process group 0 for them: itself and this shell.
    proc = run_shell('ulimit -n 24; "$CADRE" run -q -n 12 --framework pytorch-ddl -- sleep 30; '
                     'echo "shell survived, cadre exited $?"', tmp_path)
    assert "shell survived, cadre exited 1" in proc.stdout, (proc.stdout, proc.stderr)
    assert "cadre run: " in proc.stderr and "Too many open files" in proc.stderr, proc.stderr
    (job_dir,) = list((tmp_path / "runs").iterdir())
    status = json.loads((job_dir / "status.json").read_text())
    assert status["state"] == "failed" and "Too many open files" in status["failure"]
    # The slot it could not start is named, whichever step ran out (its pipe or its log file).
    assert re.search(r"^starting learner-\d+ slot 0: ", status["failure"]), status["failure"]


def test_an_existing_job_directory_is_never_reused(tmp_path):
    out = tmp_path / "out"
    (out / "learner-1").mkdir(parents=True)
    (out / "learner-1" / "slot-0.log").write_text("an earlier job's log\n")
    proc = run_shell('"$CADRE" run -q -o out -- true', tmp_path)
    assert proc.returncode == 1
    assert "already exists and is not an empty folder" in proc.stderr, proc.stderr
    assert (out / "learner-1" / "slot-0.log").read_text() == "an earlier job's log\n"


def test_no_file_is_written_through_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    for name in ("status.json.tmp", "hosts.tmp", "manifest.yaml.tmp"):
        os.symlink(victim, out / name)
    proc = run_shell('"$CADRE" run -q -o out -- true', tmp_path)
    assert proc.returncode == 1 and "already exists" in proc.stderr, proc.stderr
    assert victim.read_text() == "precious\n"
    # A symlink as the job directory itself is refused too.
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    (tmp_path / "elsewhere").mkdir()
    proc = run_shell('"$CADRE" run -q -o link -- true', tmp_path)
    assert proc.returncode == 1 and "already exists" in proc.stderr, proc.stderr
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_an_empty_folder_made_for_the_job_is_taken(tmp_path):
    (tmp_path / "out").mkdir()
    proc = run_shell('"$CADRE" run -q -o out -- sh -c "echo hi"', tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "learner-1" / "slot-0.log").read_text() == "hi\n"
    assert [p.name for p in (tmp_path / "out").iterdir() if ".tmp" in p.name] == []


def test_a_job_that_cannot_be_set_up_says_why_in_its_directory(tmp_path):
    # A failure after the job directory was made once left the folder with a hosts file and no
    # status.json: a follower such as cadre server could only say that the runner died
    # unrecorded. Here the failure is a hosts method that does not work: a mount namespace, for a
    # runner without the capabilities to make one.
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop the capabilities a mount namespace needs")
    proc = run_shell('CADRE_HOSTS_METHOD=mount-namespace setpriv --inh-caps=-all '
                     '--bounding-set=-all "$CADRE" run -q -o out -- true', tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "CADRE_HOSTS_METHOD=mount-namespace does not work" in proc.stderr, proc.stderr
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["state"] == "failed" and status["exit_code"] == 1, status
    assert "CADRE_HOSTS_METHOD=mount-namespace" in status["failure"] and status["end_time"], status


def test_a_closed_console_loses_no_message(tmp_path):
    # With stdout closed the runner's next descriptor (its signalfd) became "the console": the
    # console queue stuck on it and held back every message, the failure summary included.
    # Learner 2 fails once learner 1's line is in its log.
    script = ('echo "line of $LEARNER_ID"; [ "$LEARNER_ID" = 1 ] && exec sleep 30; '
              'while [ ! -s "$RESULT_DIR/learner-1/slot-0.log" ]; do sleep 0.05; done; exit 3')
    proc = run_shell('"$CADRE" run -n 2 --framework pytorch-horovod --grace 1 -- sh -c \'%s\' '
                     '>&-; echo "cadre exited $?"' % script, tmp_path)
    assert "cadre exited 1" in proc.stdout, (proc.stdout, proc.stderr)
    assert "failed: learner-2 slot 0 exited with code 3" in proc.stderr, proc.stderr
    assert "    line of 2" in proc.stderr, proc.stderr
    (job_dir,) = list((tmp_path / "runs").iterdir())
    assert (job_dir / "learner-1" / "slot-0.log").read_text() == "line of 1\n"


def test_a_job_directory_that_cannot_be_written_is_reported_once(tmp_path):
    # status.json is rewritten at every slot's exit; with its folder gone (or the disk full) each
    # rewrite printed the same warning again.
    import shutil
    import time
    env = dict(os.environ)
    env.pop("CADRE_HOSTS_METHOD", None)
    script = 'while [ -d "$RESULT_DIR" ]; do sleep 0.05; done; sleep 0.$LEARNER_ID'
    proc = subprocess.Popen([CADRE, "run", "-q", "-o", "out", "-n", "4", "--framework",
                             "pytorch-horovod", "--", "sh", "-c", script], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        status = tmp_path / "out" / "status.json"

        def all_started():
            try:
                slots = [s for l in json.loads(status.read_text())["learners"] for s in l["slots"]]
            except (OSError, ValueError):
                return False
            return len(slots) == 4 and all(s["state"] == "running" for s in slots)

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all_started():
            time.sleep(0.05)
        while (tmp_path / "out").exists():  # the runner may be writing a file in it meanwhile
            shutil.rmtree(tmp_path / "out", ignore_errors=True)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert err.count("status.json is not kept up to date") == 1, err
