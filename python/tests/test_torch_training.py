"""DistributedOptimizer, state broadcasts and join, as jobs started by `cadre run`, against
single-process closed forms (torch_job_training.py); a failure names the check and the rank."""
import json

import pytest

from hvd_jobs import check_results, run_script

pytest.importorskip("torch")

REQUIRED = [
    "optimizer.averages_gradients", "optimizer.fp16_compression", "optimizer.float64_model",
    "optimizer.gradient_predivide_factor", "optimizer.failed_step_frees_its_names",
    "optimizer.op_sum", "optimizer.step_closure_matches_one_process",
    "optimizer.step_closure_edge_cases",
    "optimizer.backward_passes_per_step", "optimizer.gradients_submitted_during_backward",
    "optimizer.synchronize_clip_skip_synchronize",
    "optimizer.parameter_unused_on_some_ranks", "optimizer.layers_unfrozen_or_frozen_later",
    "optimizer.sparse_as_dense",
    "optimizer.process_set", "optimizer.param_groups_without_named_parameters",
    "broadcast_parameters_and_adam_state", "broadcast_parameters_named_and_sgd_momentum",
    "broadcast_state_of_a_wrapped_optimizer",
    "optimizer.adasum", "join_with_uneven_batches", "join.collectives_while_others_joined",
]


@pytest.mark.parametrize("learners,compute,size", [(2, "cpux2", 4), (3, "cpu", 3)],
                         ids=["2x2", "3x1"])
def test_distributed_optimizer_matches_single_process_training(tmp_path, learners, compute, size):
    # HOROVOD_TIMELINE is written by global rank 0 alone: the odd ranks' process set (whose
    # engine has global rank 1 as its rank 0) must not write the same file from another process.
    timeline = tmp_path / "env-timeline.json"
    job = run_script(tmp_path, "torch_job_training.py", learners, compute, timeout=240,
                     env={"HOROVOD_TIMELINE": str(timeline)})
    check_results(job, size, REQUIRED)
    events = json.loads(timeline.read_text())
    tensors = {e["args"]["name"] for e in events if e.get("name") == "process_name" and e["pid"]}
    # Horovod's names: the operation, then the tensor's name (a gradient is named after its
    # parameter).
    assert {"allreduce.0.weight", "allgather.join.identical"} <= tensors, sorted(tensors)
