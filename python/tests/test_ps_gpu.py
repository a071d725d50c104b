"""cadre.ps.DistributedOptimizer with a model on a device (the simulated one of sim_device.py):
gradients reach the servers through page-locked host copies and the servers' values come back,
so training matches torch.optim on the CPU step for step."""
import pytest

torch = pytest.importorskip("torch")
import cadre.ps as ps  # noqa: E402
from cadre.torch import devices  # noqa: E402
from sim_device import SimDevice, install  # noqa: E402
from test_ps import batches, make_model  # noqa: E402


def test_model_on_a_device_trains_as_torch_optim_does():
    sim = SimDevice(host_is_compute=True, seed=3)
    server = ps.PsServer("127.0.0.1:0", 1, "tok", 30.0)
    previous = install(sim)
    try:
        local, remote = make_model(1), make_model(2)
        local.load_state_dict(remote.state_dict())
        opt_local = torch.optim.SGD(local.parameters(), lr=0.05, momentum=0.9)
        opt_remote = ps.DistributedOptimizer(
            torch.optim.SGD(remote.parameters(), lr=0.05, momentum=0.9), model=remote,
            servers=["127.0.0.1:%d" % server.port], worker_id=0, token="tok")
        for x, y in batches(5):
            for model, opt in ((local, opt_local), (remote, opt_remote)):
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
        sim.drain()
        for (name, a), b in zip(local.named_parameters(), remote.parameters()):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), name
        opt_remote.done()
        assert server.wait(10)
    finally:
        devices.set_provider(previous)
        server.shutdown()
    params = len(list(remote.parameters()))
    # Every step: each gradient to the host, each new value back to the device (and the values
    # once at the start); each parameter and gradient has one host buffer for the whole run.
    assert len(sim.ran("copy", "side")) >= 2 * params * 6
    assert {e[2] for e in sim.ran("copy", "side")} == {"device->host", "host->device"}
    assert sim.host_buffers == 2 * params


def test_a_model_on_another_device_is_refused_naming_the_parameter():
    """A model on a device that is neither the CPU nor CUDA (meta here; mps, xpu, ...): refused
    before anything is declared, naming the parameter and its device."""
    model = torch.nn.Linear(3, 2, device="meta")
    with pytest.raises(ValueError, match=r"cadre.ps: parameter 'weight' is on device 'meta'; "
                                         r"parameter-server mode trains parameters on the CPU or "
                                         r"on CUDA GPUs"):
        ps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model,
                                servers=["127.0.0.1:9"], worker_id=0, token="tok")
