"""Horovod 0.28 parity of horovod.torch (issue 17), as jobs started by `cadre run`: 2 learners
x 1 slot (2 ranks, TCP) and 2 x 2 (4 ranks, where process sets hold two ranks each). Each job
runs every check of torch_job_parity.py on every rank; a failure names the check and the rank.
The job's HOROVOD_TIMELINE file must be Horovod's timeline format."""
import json
import os

import pytest

from hvd_jobs import check_results, run_script

pytest.importorskip("torch")

DTYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
          "float64", "bool"]
REQUIRED = (
    ["dtype.%s" % d for d in DTYPES]
    + ["scale.%s" % d for d in DTYPES if d != "bool"]
    + ["scale.float16_range", "process_sets.static_at_init",
       "root_rank.is_global_with_process_sets", "reducescatter.gradient_and_errors",
       "sparse.allreduce_async_and_sync", "sparse.optimizer_embedding",
       "sparse.optimizer_embedding_as_dense", "optimizer_state.parameters_without_grads",
       "optimizer_state.missing_and_empty_state",
       "errors.allgather_after_join_and_the_job_continues", "errors.types_match_horovod",
       "adasum.allreduce_power_of_two", "adasum.delta_optimizer", "mpi_ops_names_scripts_import",
       "nothing_accepted_and_ignored", "optimizer.groups_count", "optimizer.groups_lists",
       "optimizer.num_groups_deprecated",
       "optimizer.gradient_predivide_factor_keeps_float16_in_range",
       "timeline.started_by_script"])


def check_horovod_timeline(events, mark_cycles):
    """The layout of horovod/common/timeline.cc: pid 0 carries the start time, every tensor is
    a process named "<op>.<name>", negotiation then the operation as B/E pairs (per-rank X
    marks inside the negotiation), the last E with dtype and shape."""
    assert events[0]["name"] == "process_name" and events[0]["pid"] == 0, events[0]
    assert "start_time_since_epoch_in_micros" in events[0]["args"], events[0]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e["name"] == "process_name" and e["pid"] > 0}
    assert "allreduce.dt.ar.int16.Sum" in names.values(), sorted(names.values())[:20]
    sort_index = {e["pid"]: e["args"]["sort_index"] for e in events
                  if e.get("ph") == "M" and e["name"] == "process_sort_index"}
    assert all(sort_index[pid] == pid for pid in names), sort_index
    pid = {v: k for k, v in names.items()}["allreduce.dt.ar.int16.Sum"]
    mine = [e for e in events if e.get("pid") == pid and e.get("ph") != "M"]
    phases = [(e["ph"], e.get("name")) for e in mine]
    assert phases[0] == ("B", "NEGOTIATE_ALLREDUCE"), phases
    assert ("B", "ALLREDUCE") in phases, phases
    assert any(ph == "X" for ph, _ in phases), phases  # a rank's request arrived
    assert mine[-1]["ph"] == "E" and mine[-1]["args"] == {"dtype": "HOROVOD_INT16",
                                                          "shape": "[2, 3]"}, mine[-1]
    depth = 0
    for e in mine:
        depth += {"B": 1, "E": -1}.get(e["ph"], 0)
        assert depth >= 0, mine
    assert depth == 0, mine
    assert all(isinstance(e.get("ts"), int) for e in events if e.get("ph") != "M")
    assert any(e.get("name") == "CYCLE_START" and e["ph"] == "i" for e in events) == mark_cycles


@pytest.mark.parametrize("learners,compute,size", [(2, "cpu", 2), (2, "cpux2", 4)],
                         ids=["2x1", "2x2"])
def test_horovod_parity_under_cadre_run(tmp_path, learners, compute, size):
    timeline = tmp_path / "env-timeline.json"
    job = run_script(tmp_path, "torch_job_parity.py", learners, compute, timeout=400,
                     env={"HOROVOD_TIMELINE": str(timeline), "HOROVOD_CYCLE_TIME": "0.5"})
    check_results(job, size, REQUIRED)
    check_horovod_timeline(json.loads(timeline.read_text()), mark_cycles=False)
    started = [os.path.join(d, f) for d, _, files in os.walk(job.job_dir) for f in files
               if f.startswith("started-timeline")]
    assert [os.path.basename(p) for p in started] == ["started-timeline-0.json"], started
    with open(started[0]) as f:
        events = json.load(f)
    assert any(e.get("args", {}).get("name") == "allreduce.tl.traced" for e in events), events
    assert any(e.get("name") == "CYCLE_START" for e in events), events
