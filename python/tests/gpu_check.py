"""The GPU half of issue 19's checks, for scripts/gpu-check.sh on a machine with a GPU (and no
`cadre` program: its image has no Debian packages, so only the core and the Python extension are
built there). Ranks are started by cadre.torch.testing.run_ranks, all on this machine, sharing
its GPUs. Prints one line per job and a table at the end; exits 1 when something failed.

    python3 python/tests/gpu_check.py --data-dir DIR [--ranks 2] [--out DIR] [--device sim]

--device sim is a dry run on CPUs (the simulated device of sim_device.py, the example on the CPU
for 50 batches): it checks this script and gpu-check.sh themselves where no GPU is.
"""
import argparse
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
_CHECK = re.compile(r"^CHECK rank=(\d+) (\S+) (ok|FAIL)(?: (.*))?$", re.M)


def run_job(name, args, ranks, env, out_dir, timeout):
    from cadre.torch.testing import run_ranks
    start = time.time()
    results = run_ranks(args, ranks, env=env, timeout=timeout)
    seconds = time.time() - start
    checks, failed = 0, []
    with open(os.path.join(out_dir, name + ".log"), "w") as log:
        for res in results:
            log.write("===== rank %d exit %s\n%s\n----- stderr\n%s\n"
                      % (res.rank, res.returncode, res.stdout, res.stderr))
            for m in _CHECK.finditer(res.stdout):
                checks += 1
                if m.group(3) != "ok":
                    failed.append("rank %s %s: %s" % (m.group(1), m.group(2),
                                                      (m.group(4) or "")[:300]))
    exits = [res.returncode for res in results]
    ok = all(code == 0 for code in exits) and not failed
    note = "%d checks" % checks if checks else ""
    if not ok:
        note = "; ".join(failed[:3]) or "exit codes %s" % exits
    print("%-34s %-4s %6.1f s  %s" % (name, "ok" if ok else "FAIL", seconds, note), flush=True)
    return name, ok, seconds, note, results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True, help="Fashion-MNIST's four .gz IDX files")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--out", default=".")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--device", choices=["cuda", "sim"], default="cuda")
    args = parser.parse_args()
    import torch
    dry = args.device == "sim"
    if not dry and not torch.cuda.is_available():
        sys.exit("gpu_check: this PyTorch sees no GPU (torch %s, CUDA %s)"
                 % (torch.__version__, torch.version.cuda))
    os.makedirs(args.out, exist_ok=True)
    job = os.path.join(HERE, "torch_job_on_device.py")
    gpu_job = os.path.join(HERE, "torch_job_gpu.py")
    base = {"CADRE_TEST_DEVICE": args.device, "PYTHONUNBUFFERED": "1",
            "HOROVOD_STALL_CHECK_TIME_SECONDS": "20", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "60",
            "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])}
    rows = [
        run_job("collectives-on-cuda", [job, "torch_job_collectives.py"], args.ranks,
                dict(base, CADRE_TEST_DEVICE="sim+copies" if dry else "cuda"), args.out, 300),
        run_job("models-on-cuda", [gpu_job], args.ranks, base, args.out, 240),
        # NCCL refuses two ranks on one GPU: its path's streams and ordering run with Gloo's
        # CUDA allreduce in NCCL's place (the real NCCL needs a GPU per rank).
        run_job("nccl-path-on-cuda-with-gloo", [gpu_job], args.ranks,
                dict(base, CADRE_TEST_NCCL_STAND_IN="gloo"), args.out, 240),
        run_job("one-rank-models-on-cuda", [gpu_job], 1, base, args.out, 240),
    ]
    example = [os.path.join(ROOT, "examples", "fashion_mnist", "train_horovod.py"), "--epochs",
               str(args.epochs), "--data-dir", args.data_dir, "--result-dir", args.out]
    if dry:
        example += ["--no-cuda", "--max-batches", "50"]
    name, ok, seconds, note, results = run_job("fashion-mnist-horovod-on-cuda", example,
                                               args.ranks, dict(base), args.out, 420)
    found = re.search(r"test accuracy (\S+) .* after (\S+) s on \d+ ranks \((\S+)\)",
                      results[0].stdout)
    ok = ok and found is not None
    if found:
        note = "accuracy %s in %s s on %s" % found.groups()
        ok = ok and found.group(3).startswith("cpu" if dry else "cuda")
    rows.append((name, ok, seconds, note, results))
    print("\n| check | result | seconds | notes |\n|---|---|---|---|")
    for name, ok, seconds, note, _ in rows:
        print("| %s | %s | %.1f | %s |" % (name, "ok" if ok else "FAIL", seconds, note))
    if dry:
        print("\ndry run on CPUs (simulated device), torch %s" % torch.__version__)
    else:
        nccl = torch.cuda.nccl.version()
        print("\ntorch %s, CUDA %s, NCCL %s, %d x %s" % (
            torch.__version__, torch.version.cuda,
            ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,
            torch.cuda.device_count(), torch.cuda.get_device_name(0)))
    sys.exit(0 if all(r[1] for r in rows) else 1)


if __name__ == "__main__":
    main()
