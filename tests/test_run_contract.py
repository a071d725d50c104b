"""`cadre run` end to end: the learner contract on every slot, names, ports, job directory."""
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import textwrap

import pytest

from runner_helpers import CADRE, ROOT

# Writes the slot's whole environment, and what `python3` on its PATH is, to RESULT_DIR.
DUMP_ENV = textwrap.dedent("""
    import json, os, shutil
    env = dict(os.environ)
    env["__python3__"] = os.path.realpath(shutil.which("python3"))
    env["__cwd__"] = os.getcwd()
    path = os.path.join(os.environ["RESULT_DIR"], "env-%s.json" % os.environ["CADRE_RANK"])
    with open(path, "w") as f:
        json.dump(env, f)
    print("dumped rank", os.environ["CADRE_RANK"])
""")


def load_envs(job_dir):
    envs = {}
    for name in os.listdir(job_dir):
        if name.startswith("env-"):
            with open(os.path.join(job_dir, name)) as f:
                env = json.load(f)
            envs[int(env["CADRE_RANK"])] = env
    return envs


def test_every_contract_variable_on_every_slot(cadre_run, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_run("-n", "2", "--compute", "k80x2", "--framework", "pytorch-horovod",
                    "--", "python3", "dump_env.py")
    assert job.returncode == 0, job.stderr
    envs = load_envs(job.job_dir)
    assert sorted(envs) == [0, 1, 2, 3]
    training_id = os.path.basename(job.job_dir)
    tokens = set()
    for rank, env in envs.items():
        learner, local = rank // 2 + 1, rank % 2
        assert env["LEARNER_ID"] == str(learner)
        assert env["NUM_LEARNERS"] == "2"
        assert env["LEARNER_NAME_PREFIX"] == "learner"
        assert env["GPU_COUNT"] == "0"  # no GPUs here: k80x2 slots run as CPU processes
        assert env["TRAINING_ID"] == training_id
        assert env["RESULT_DIR"] == job.job_dir
        assert env["LOG_DIR"] == os.path.join(job.job_dir, f"learner-{learner}")
        for var in ("DATA_DIR", "LOG_DIR", "CHECKPOINT_DIR", "MODEL_DIR", "JOB_STATE_DIR"):
            assert os.path.isdir(env[var]), var
        assert env["MODEL_DIR"] == str(tmp_path) == env["__cwd__"]
        for prefix in ("CADRE_", "HOROVOD_"):
            assert env[prefix + "RANK"] == str(rank)
            assert env[prefix + "SIZE"] == "4"
            assert env[prefix + "LOCAL_RANK"] == str(local)
            assert env[prefix + "LOCAL_SIZE"] == "2"
            assert env[prefix + "CROSS_RANK"] == str(learner - 1)
            assert env[prefix + "CROSS_SIZE"] == "2"
        assert env["CADRE_HOST"] == env["HOROVOD_HOSTNAME"] == f"learner-{learner}"
        assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == (str(rank), "4", str(local))
        assert env["MASTER_ADDR"] == "learner-1" and env["MASTER_PORT"] == "29500"
        host, port = env["CADRE_STORE"].rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        assert len(env["CADRE_JOB_TOKEN"]) == 64
        tokens.add(env["CADRE_JOB_TOKEN"])
        assert int(env["OMP_NUM_THREADS"]) == max(1, os.cpu_count() // 4)
        assert "CUDA_VISIBLE_DEVICES" not in env  # only set when the machine has GPUs
        assert "TF_CONFIG" not in env and "PS_HOSTS_COUNT" not in env
        # python3 in the command is the interpreter with torch, and `import cadre` works.
        assert env["__python3__"] == os.path.realpath("/usr/bin/python3")
        assert os.path.join(ROOT, "python") in env["PYTHONPATH"].split(":")
    assert len(tokens) == 1
    # Each slot's output is in its log and on the console with its prefix.
    assert "[learner-2/1] dumped rank 3" in job.stdout
    with open(os.path.join(job.job_dir, "learner-2", "slot-1.log")) as f:
        assert f.read() == "dumped rank 3\n"
    # A GPU configuration on a CPU machine warns once.
    assert job.stderr.count("has none; its slots run as CPU processes") == 1


def test_parameter_server_mode(cadre_run, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    # Servers wait to be stopped; workers finish (once the server has written its environment),
    # which ends the job successfully.
    script = ('python3 dump_env.py && if [ "$CADRE_ROLE" = ps ]; then exec sleep 60; fi; '
              'i=0; while [ ! -e "$RESULT_DIR/env-0.json" ] && [ $i -lt 600 ]; do '
              'sleep 0.05; i=$((i+1)); done')
    job = cadre_run("-n", "3", "--framework", "pytorch", "--parameter-servers", "1",
                    "--grace", "5", "--", "sh", "-c", script)
    assert job.returncode == 0, job.stderr
    envs = load_envs(job.job_dir)
    assert sorted(envs) == [0, 1, 2]
    assert envs[0]["CADRE_ROLE"] == "ps" and envs[1]["CADRE_ROLE"] == "worker"
    for env in envs.values():
        assert env["PS_HOSTS_COUNT"] == "1"
        assert env["CADRE_SIZE"] == "3" and env["CADRE_LOCAL_SIZE"] == "1"
    tf = json.loads(envs[2]["TF_CONFIG"])
    assert tf["cluster"] == {"ps": ["learner-1:2222"],
                             "worker": ["learner-2:2222", "learner-3:2222"]}
    assert tf["task"] == {"type": "worker", "index": 1}
    status = job.status()
    assert status["state"] == "completed"
    server = status["learners"][0]
    assert server["role"] == "parameter-server"
    assert server["slots"][0]["signal"] == "SIGTERM"
    assert server["slots"][0]["stopped_by_runner"] is True


RESOLVE_AND_BIND = textwrap.dedent("""
    import json, os, socket, time
    me, n = int(os.environ["LEARNER_ID"]), int(os.environ["NUM_LEARNERS"])
    prefix, rd = os.environ["LEARNER_NAME_PREFIX"], os.environ["RESULT_DIR"]
    # Plain getaddrinfo, as any program would do it.
    addrs = {i: socket.getaddrinfo(f"{prefix}-{i}", 2222, socket.AF_INET,
                                   socket.SOCK_STREAM)[0][4][0] for i in range(1, n + 1)}
    listener = socket.socket()
    listener.bind((addrs[me], 2222))  # no SO_REUSEADDR: the port must really be free
    listener.listen(8)
    open(os.path.join(rd, f"bound-{me}"), "w").close()
    deadline = time.time() + 30
    while not all(os.path.exists(os.path.join(rd, f"bound-{i}")) for i in range(1, n + 1)):
        assert time.time() < deadline, "peers did not bind in time"
        time.sleep(0.02)
    for i in range(1, n + 1):  # connect to every learner by name on port 2222
        socket.create_connection((f"{prefix}-{i}", 2222), timeout=10).close()
    with open(os.path.join(rd, f"resolved-{me}.json"), "w") as f:
        json.dump(addrs, f)
    open(os.path.join(rd, f"done-{me}"), "w").close()
    while not all(os.path.exists(os.path.join(rd, f"done-{i}")) for i in range(1, n + 1)):
        assert time.time() < deadline, "peers did not finish in time"
        time.sleep(0.02)
""")


@pytest.mark.parametrize("method", ["auto", "user-namespace"])
def test_names_resolve_and_each_learner_has_port_2222(cadre_run, tmp_path, method):
    (tmp_path / "net.py").write_text(RESOLVE_AND_BIND)
    job = cadre_run("-n", "3", "--framework", "pytorch", "--", "python3", "net.py",
                    env={"CADRE_HOSTS_METHOD": method})
    assert job.returncode == 0, job.stdout + job.stderr
    status = job.status()
    expected = {str(l["id"]): l["address"] for l in status["learners"]}
    assert len(set(expected.values())) == 3
    for learner in range(1, 4):
        with open(os.path.join(job.job_dir, f"resolved-{learner}.json")) as f:
            assert json.load(f) == expected  # every learner resolves every name the same way
    if method == "user-namespace":
        assert status["hosts_method"] == "user-namespace"


def test_cadre_hosts_fallback_warns_once(cadre_run, tmp_path):
    (tmp_path / "dump_env.py").write_text(DUMP_ENV)
    job = cadre_run("-n", "2", "--framework", "pytorch", "--", "python3", "dump_env.py",
                    env={"CADRE_HOSTS_METHOD": "cadre-hosts"})
    assert job.returncode == 0, job.stderr
    assert job.stderr.count("warning: no mount namespace") == 1
    envs = load_envs(job.job_dir)
    hosts_file = os.path.join(job.job_dir, "hosts")
    addresses = {l["host"]: l["address"] for l in job.status()["learners"]}
    for env in envs.values():
        assert env["CADRE_HOSTS"] == hosts_file
        assert env["MASTER_ADDR"] == addresses["learner-1"]  # an address: names don't resolve
    with open(hosts_file) as f:
        lines = f.read().splitlines()
    for name, address in addresses.items():
        assert f"{address}\t{name}" in lines


def test_manifest_job_directory(cadre_run, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "job.yaml").write_text(textwrap.dedent("""
        name: dir-check
        framework: {name: pytorch-ddl}
        execution:
          command: echo "learner $LEARNER_ID slot $CADRE_LOCAL_RANK in $(pwd)"; echo no-newline | tr -d '\\n'
          compute_configuration: {name: cpux2, nodes: 2}
        training_data_reference: {type: fs, location: {path: /usr/share}}
        training_results_reference: {type: fs, location: {path: results}}
    """))
    job = cadre_run("code/job.yaml", "--quiet")
    assert job.returncode == 0, job.stderr
    assert job.stdout == ""  # --quiet
    results = code / "results"  # relative to the manifest's folder
    (job_dir,) = list(results.iterdir())
    for name in ("manifest.yaml", "manifest.original.yaml", "status.json", "hosts",
                 "learner-1", "learner-2", "checkpoints", "state"):
        assert (job_dir / name).exists(), name
    assert (job_dir / "manifest.original.yaml").read_text() == (code / "job.yaml").read_text()
    assert "compute_configuration: {name: cpux2, nodes: 2}" in (job_dir / "manifest.yaml").read_text()
    log = (job_dir / "learner-2" / "slot-1.log").read_text()
    assert log == f"learner 2 slot 1 in {code}\nno-newline\n"
    status = json.loads((job_dir / "status.json").read_text())
    assert status["name"] == "dir-check"
    assert status["state"] == "completed" and status["exit_code"] == 0
    assert status["failure"] is None
    assert status["start_time"] <= status["end_time"]
    slots = [s for l in status["learners"] for s in l["slots"]]
    assert [s["rank"] for s in slots] == [0, 1, 2, 3]
    assert all(s["exit_code"] == 0 and s["state"] == "succeeded" for s in slots)
    assert slots[3]["log"] == "learner-2/slot-1.log"


def test_ffdl_manifest_and_output_dir(cadre_run, tmp_path):
    (tmp_path / "ffdl.yml").write_text(textwrap.dedent("""
        name: ffdl
        learners: 2
        gpus: 1
        framework:
          name: tensorflow-horovod
          command: echo "$TRAINING_ID $CADRE_SIZE"
    """))
    job = cadre_run("ffdl.yml", "-o", "out")
    assert job.returncode == 0, job.stderr
    assert "[learner-1/0] " in job.stdout
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["framework"] == "tensorflow-horovod" and status["nodes"] == 2
    assert "2\n" in (tmp_path / "out" / "learner-2" / "slot-0.log").read_text()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to drop to an unprivileged user")
def test_unprivileged_user_gets_names_through_a_user_namespace():
    """As an ordinary user (nobody) the private /etc/hosts comes from a user namespace that maps
    the user to itself: names resolve and the learner keeps its own uid."""
    with tempfile.TemporaryDirectory() as where:  # pytest's tmp_path is private to root
        os.chmod(where, 0o777)
        check_unprivileged_job(pathlib.Path(where))


def check_unprivileged_job(tmp_path):
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", CADRE, "run", "-n", "2",
         "--framework", "pytorch-horovod", "--", "sh", "-c", "id -u; getent hosts learner-1"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60,
        env={**os.environ, "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "[learner-2/0] 65534" in proc.stdout
    assert "learner-1" in [line.split()[-1] for line in proc.stdout.splitlines()
                           if line.startswith("[learner-2/0] 127.0.")]
    (job_dir,) = list((tmp_path / "runs").iterdir())
    assert json.loads((job_dir / "status.json").read_text())["hosts_method"] == "user-namespace"
    assert "warning" not in proc.stderr


AFFINITY = textwrap.dedent("""
    import json, os
    path = os.path.join(os.environ["RESULT_DIR"], "cpus-%s.json" % os.environ["CADRE_RANK"])
    with open(path, "w") as f:
        json.dump(sorted(os.sched_getaffinity(0)), f)
""")


@pytest.mark.parametrize("bind", ["", "none"])
def test_slots_are_bound_to_their_share_of_the_cpus(cadre_run, tmp_path, bind):
    from cadre.torch.testing import cpu_plan
    (tmp_path / "affinity.py").write_text(AFFINITY)
    job = cadre_run("-n", "2", "--compute", "k80", "--framework", "pytorch-horovod",
                    "--", "python3", "affinity.py", env={"CADRE_CPU_BIND": bind})
    assert job.returncode == 0, job.stderr
    usable = sorted(os.sched_getaffinity(0))
    plan = cpu_plan(2, usable, bind)
    for rank in range(2):
        with open(os.path.join(job.job_dir, "cpus-%d.json" % rank)) as f:
            cpus = json.load(f)
        assert cpus == (plan[rank] if plan else usable), (rank, bind)
    if bind == "" and len(usable) >= 2:
        assert plan is not None  # the two slots do not share a CPU


@pytest.mark.parametrize("variable,value,allowed", [
    ("CADRE_CPU_BIND", "cores", "auto (the default) or none"),
    ("CADRE_HOSTS_METHOD", "etc-hosts",
     "auto (the default), mount-namespace, user-namespace or cadre-hosts"),
])
def test_a_bad_runner_variable_is_bad_usage(cadre_run, tmp_path, variable, value, allowed):
    # Like a bad flag: exit code 2, the variable and its values named, nothing started.
    job = cadre_run("-n", "1", "--", "true", env={variable: value})
    assert job.returncode == 2, job.stderr
    assert f"{variable}: '{value}' is not one of {allowed}" in job.stderr, job.stderr
    assert "nothing was started" in job.stderr
    assert not (tmp_path / "runs").exists()
