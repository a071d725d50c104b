"""cadre.ddl: the options string, and the API as a real job of 2 learners x 2 slots — once with
the test launcher (always), once under `cadre run --framework pytorch-ddl` (when the build has the
cadre binary)."""
import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
from cadre.ddl import options  # noqa: E402
from cadre.torch.testing import run_ranks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
JOB = os.path.join(HERE, "ddl_job.py")
# Tiny groups, so grads_reduce submits several groups per call.
JOB_ENV = {"TEST_HOSTS": "2", "DDL_GROUP_SIZE": "64", "TEST_DDL_OPTIONS": "-mode h:2x2"}


def test_options_defaults_and_flags():
    o = options.from_environment(None, environ={})
    assert (o.algorithm, o.dims, o.dump_iter, o.group_size) == \
        ("hierarchical", [], 0, options.DEFAULT_GROUP_SIZE)
    o = options.from_environment("-mode r -dump_iter 5", environ={})
    assert (o.algorithm, o.dims, o.dump_iter) == ("ring", [], 5)
    o = options.from_environment(None, environ={"DDL_OPTIONS": "-mode h:2x2x3",
                                                "DDL_GROUP_SIZE": "1024"})
    assert (o.algorithm, o.dims, o.host_grid(), o.group_size) == \
        ("hierarchical", [2, 2, 3], [2, 3], 1024)


def test_ddlrun_mode_p_is_the_hierarchical_allreduce():
    # IBM's ddlrun puts its topology-aware default into DDL_OPTIONS: -mode p:GPUSxHOSTSx1x1.
    o = options.from_environment(None, environ={"DDL_OPTIONS": "-mode p:4x1x1x1"})
    assert (o.algorithm, o.dims, o.host_grid()) == ("hierarchical", [4, 1, 1, 1], [])
    options.check_topology(o, 4, 1)
    o = options.parse("-mode p:2x2x1x3")
    assert (o.algorithm, o.host_grid()) == ("hierarchical", [2, 3])
    options.check_topology(o, 2, 6)
    with pytest.raises(ValueError, match="4 slot\\(s\\) x 1 learner\\(s\\), but the job has 4 "
                                         "slot\\(s\\) per learner x 2"):
        options.check_topology(options.parse("-mode p:4x1x1x1"), 4, 2)


def test_unsupported_mode_lists_the_supported_ones():
    with pytest.raises(ValueError) as info:
        options.parse("-mode b:4x2")
    text = str(info.value)
    assert "-mode 'b:4x2': algorithm 'b' is not supported" in text, text
    for letter in ("h (hierarchical)", "p (hierarchical", "r (one flat ring)"):
        assert letter in text, text


def test_argument_overrides_ddl_options():
    o = options.from_environment("-mode r", environ={"DDL_OPTIONS": "-mode h:4x2 -dump_iter 3"})
    assert (o.algorithm, o.dims, o.dump_iter) == ("ring", [], 3)


@pytest.mark.parametrize("text, message", [
    ("-mode", "needs a value"),
    ("-mode q:2x2", "algorithm 'q'"),
    ("-mode h:2x0", "dimension '0'"),
    ("-mode h:2xx2", "dimension ''"),
    ("-dump_iter zero", "not an integer"),
    ("-dump_iter 0", "must be >= 1"),
    ("-gpus 4", "unknown DDL option '-gpus'"),
])
def test_bad_options_name_the_part(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        options.parse(text)


def test_bad_group_size_names_the_variable():
    with pytest.raises(ValueError, match="DDL_GROUP_SIZE"):
        options.from_environment(None, environ={"DDL_GROUP_SIZE": "-5"})


def test_dims_must_describe_the_job():
    options.check_topology(options.parse("-mode h:2x2"), 2, 2)
    options.check_topology(options.parse("-mode h:2x2x3"), 2, 6)
    options.check_topology(options.parse("-mode h"), 3, 5)
    with pytest.raises(ValueError, match="2 slot\\(s\\) x 3 learner\\(s\\), but the job has 2"):
        options.check_topology(options.parse("-mode h:2x3"), 2, 2)


def _check(results):
    for res in results:
        assert res.returncode == 0, "rank %d failed:\n%s\n%s" % (res.rank, res.stdout, res.stderr)
        assert "OK %d" % res.rank in res.stdout


def test_api_on_two_learners_of_two_slots():
    _check(run_ranks([JOB], 4, hosts=2, env=JOB_ENV, timeout=150))


def test_api_under_cadre_run(tmp_path):
    build = os.environ.get("CADRE_BUILD_DIR", os.path.join(ROOT, "build"))
    cadre = os.path.join(build, "cadre")
    if not os.path.exists(cadre):
        pytest.skip("no cadre binary in %s" % build)
    # IBM's ddlrun writes -mode p:<slots>x<hosts>x1x1 into DDL_OPTIONS: the same job under it.
    env = dict(os.environ, **dict(JOB_ENV, TEST_DDL_OPTIONS="-mode p:2x2x1x1"))
    proc = subprocess.run(
        [cadre, "run", "-n", "2", "--compute", "cpux2", "--framework", "pytorch-ddl",
         "--results-dir", str(tmp_path), "--", "/usr/bin/python3", JOB],
        env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for rank in range(4):
        assert "OK %d" % rank in proc.stdout + proc.stderr
