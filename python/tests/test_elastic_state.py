"""hvd.elastic's state objects and run() in one process (a job of size 1): commit/restore/sync,
the rollback on HorovodInternalError and the reset on HostsUpdatedInterrupt, the sampler's
split of what is left of an epoch, and the commit file a restarted job resumes from."""
import pytest

torch = pytest.importorskip("torch")

import horovod.torch as hvd  # noqa: E402
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: E402


@pytest.fixture
def single(monkeypatch):
    for name in ("CADRE_SIZE", "CADRE_RANK", "HOROVOD_SIZE", "HOROVOD_RANK", "CADRE_STORE",
                 "CADRE_MAX_RESTARTS", "CHECKPOINT_DIR", "CADRE_RESTART_COUNT",
                 "CADRE_ELASTIC_UPDATES"):
        monkeypatch.delenv(name, raising=False)
    hvd.init()
    yield
    hvd.shutdown()


def make_state():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, opt, hvd.elastic.TorchState(model=model, optimizer=opt, epoch=0, note="a")


def step(model, opt):
    opt.zero_grad()
    model(torch.ones(2, 3)).sum().backward()
    opt.step()


def test_the_module_paths_horovod_users_import(single):
    import horovod.torch.elastic as elastic
    from horovod.torch.elastic import ElasticSampler, TorchState, run  # noqa: F401
    assert elastic is hvd.elastic
    assert issubclass(hvd.elastic.TorchState, hvd.elastic.ObjectState)
    assert issubclass(hvd.elastic.ObjectState, hvd.elastic.State)
    assert HostsUpdatedInterrupt(True).skip_sync and not HostsUpdatedInterrupt(False).skip_sync
    # Horovod's own module of that name has the exceptions too (docs/horovod.md).
    from horovod.common import elastic as common
    assert common.HostsUpdatedInterrupt is HostsUpdatedInterrupt
    assert common.HorovodInternalError is HorovodInternalError
    assert issubclass(common.ObjectState, common.State) and callable(common.run_fn)


def test_restore_goes_back_to_the_last_commit(single):
    model, opt, state = make_state()
    step(model, opt)
    state.epoch = 1
    state.commit()
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    step(model, opt)
    state.epoch, state.note = 2, "b"
    assert not torch.equal(model.weight, committed["weight"])
    state.restore()
    assert state.epoch == 1 and state.note == "a"
    for k, v in model.state_dict().items():
        assert torch.equal(v, committed[k]), k
    # The optimizer's momentum went back too: the same step again gives the same weights.
    step(model, opt)
    again = model.weight.clone()
    state.restore()
    step(model, opt)
    assert torch.equal(model.weight, again)
    assert state.commits == 1


def test_run_rolls_back_on_HorovodInternalError_and_calls_again(single):
    model, opt, state = make_state()
    calls, resets = [], []
    state.register_reset_callbacks([lambda: resets.append(hvd.is_initialized())])

    @hvd.elastic.run
    def train(state, fail_once):
        calls.append(state.epoch)
        state.epoch += 1
        state.commit()
        state.epoch += 10  # not committed: lost on the rollback
        if fail_once and len(calls) == 1:
            raise HorovodInternalError("rank 1 died")
        return state.epoch

    assert train(state, True) == 12
    assert calls == [0, 1] and resets == [True]  # restarted engine, then the callbacks


def test_run_keeps_the_state_on_HostsUpdatedInterrupt(single):
    _, _, state = make_state()
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(state.epoch)
        state.epoch += 5  # not committed, but kept: hosts changed, nothing failed
        if len(calls) == 1:
            raise HostsUpdatedInterrupt(skip_sync=True)
        return state.epoch

    assert train(state) == 10 and calls == [0, 5]


def test_commits_are_written_for_a_restarted_job_and_resumed(single, tmp_path, monkeypatch):
    monkeypatch.setenv("CADRE_MAX_RESTARTS", "1")
    monkeypatch.setenv("CHECKPOINT_DIR", str(tmp_path))
    model, opt, state = make_state()
    step(model, opt)
    state.epoch = 3
    state.commit()
    state.commit()
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    assert (tmp_path / "hvd-elastic-state.pt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["hvd-elastic-state.pt"]  # no temporaries
    step(model, opt)

    # A new process of the restarted job: fresh objects, the same script.
    monkeypatch.setenv("CADRE_RESTART_COUNT", "1")
    model2, opt2, state2 = make_state()
    seen = []

    @hvd.elastic.run
    def train(state):
        seen.append((state.epoch, state.commits, hvd.elastic.restart_count()))

    train(state2)
    assert seen == [(3, 2, 1)]
    for k, v in model2.state_dict().items():
        assert torch.equal(v, saved[k]), k
    assert opt2.state_dict()["state"], "the optimizer's momentum was not restored"


def test_under_restarts_a_peer_failure_is_left_to_the_runner(single, tmp_path, monkeypatch):
    monkeypatch.setenv("CADRE_MAX_RESTARTS", "2")
    monkeypatch.setenv("CHECKPOINT_DIR", str(tmp_path))
    _, _, state = make_state()
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(1)
        raise HorovodInternalError("receiving from rank 1 failed")

    with pytest.raises(HorovodInternalError):
        train(state)
    assert calls == [1]


def test_an_announced_rejoin_leaves_at_the_commit_with_the_runners_exit_code(
        single, tmp_path, monkeypatch):
    monkeypatch.setenv("CADRE_MAX_RESTARTS", "1")
    monkeypatch.setenv("CHECKPOINT_DIR", str(tmp_path))
    updates = tmp_path / "elastic-updates.json"
    updates.write_text("{}\n")
    monkeypatch.setenv("CADRE_ELASTIC_UPDATES", str(updates))
    _, _, state = make_state()
    commits = []

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, 5):
            state.commit()
            commits.append(state.epoch)
            if state.epoch == 1:  # the runner announces while the job trains
                updates.write_text('{"learners": 3, "exit_code": 75}\n')

    with pytest.raises(SystemExit) as left:
        train(state)
    assert left.value.code == 75
    # Epochs 0 and 1 went through; the commit of epoch 2 is written, then the rank leaves.
    assert commits == [0, 1] and state.commits == 3
    assert (tmp_path / "hvd-elastic-state.pt").exists()


def test_a_malformed_or_empty_announcement_is_no_update(single, tmp_path, monkeypatch):
    updates = tmp_path / "elastic-updates.json"
    monkeypatch.setenv("CADRE_ELASTIC_UPDATES", str(updates))
    _, _, state = make_state()
    for text in (None, "", "{}", "[1]", '{"learners": 3}', "{not json"):
        if text is not None:
            updates.write_text(text)
        state.check_host_updates()  # raises nothing


def test_sampler_splits_what_is_left_of_the_epoch(single):
    data = list(range(10))
    sampler = hvd.elastic.ElasticSampler(data, shuffle=False)
    assert list(sampler) == data and len(sampler) == 10
    sampler.record_batch(0, 4)
    sampler.reset()
    assert list(sampler) == data[4:]
    state = sampler.state_dict()
    other = hvd.elastic.ElasticSampler(data, shuffle=False)
    other.load_state_dict(state)
    assert list(other) == data[4:]
    sampler.set_epoch(1)
    assert list(sampler) == data
    shuffled = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
    assert sorted(shuffled) == data and list(shuffled) != data
    assert list(hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)) == list(shuffled)
