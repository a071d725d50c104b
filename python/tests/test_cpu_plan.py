"""cadre.torch.testing binds ranks as `cadre run` binds slots (src/cadre/launch/cpu_binding.h)."""
import os

import pytest

from cadre.torch.testing import cpu_plan, run_ranks


def test_the_plan_matches_the_launchers():
    assert cpu_plan(2, [0, 1]) == [[0], [1]]
    assert cpu_plan(2, range(8)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert cpu_plan(3, [2, 3, 5, 7, 11]) == [[2], [3, 5], [7, 11]]
    assert cpu_plan(4, [0, 1]) is None
    assert cpu_plan(2, [0, 1], "none") is None
    with pytest.raises(ValueError, match='CADRE_CPU_BIND="core"'):
        cpu_plan(2, [0, 1], "core")


def test_ranks_run_on_their_share(tmp_path):
    script = tmp_path / "cpus.py"
    script.write_text("import os\nprint(sorted(os.sched_getaffinity(0)))\n")
    results = run_ranks([str(script)], 2)
    plan = cpu_plan(2)
    usable = sorted(os.sched_getaffinity(0))
    for r in results:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(plan[r.rank] if plan else usable)
