"""The rest of horovod.torch's API and its error behaviour, as a job of 2 learners x 2 slots
started by `cadre run`: each check of torch_job_api.py (and of torch_job_api_errors.py, which it
registers) runs on every rank; a failure names the check and the rank."""
import json

import pytest

from hvd_jobs import check_results, run_script

pytest.importorskip("torch")

REQUIRED = [
    "capabilities_before_init", "ranks_match_the_runner", "horovod_module_paths",
    "mismatch.shape_fails_every_rank", "mismatch.dtype_op_root_kind",
    "mismatch.grouped_sizes_fail_every_rank_at_once",
    "duplicate_pending_name_is_ValueError", "bad_arguments_raise_horovods_error_types",
    "ops_are_horovods_integers",
    "tensors_on_other_devices_are_refused_naming_the_device",
    "broadcast_object_and_allgather_object",
    "objects.lambdas_local_classes_and_unpicklable_objects",
    "objects.cuda_tensors_load_on_ranks_without_the_gpu", "process_sets", "adasum",
    "sparse_allreduce_async",
    "sync_batch_norm", "autograd.allreduce_allgather_broadcast", "autograd.alltoall_reducescatter",
    "timeline", "shutdown_then_init_again",
]


def test_api_errors_and_extras_under_cadre_run(tmp_path):
    # HOROVOD_TIMELINE: one file, written by global rank 0 only — the job's process sets have
    # engines of their own (one with rank 0 in it) that must not write it too.
    timeline = tmp_path / "env-timeline.json"
    job = run_script(tmp_path, "torch_job_api.py", 2, "cpux2", timeout=240,
                     env={"HOROVOD_TIMELINE": str(timeline)})
    check_results(job, 4, REQUIRED)
    events = json.loads(timeline.read_text())  # complete JSON: one writer, valid at any time
    tensors = {e["args"]["name"] for e in events if e.get("name") == "process_name" and e["pid"]}
    # start_timeline() took the engine's timeline over; init() after shutdown() restarted it.
    assert "allreduce.after.reinit" in tensors, sorted(tensors)
