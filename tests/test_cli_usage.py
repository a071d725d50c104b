"""Usage errors of every `cadre` subcommand: one line naming the subcommand and the option or
argument at fault, exit code 2, nothing done. CLI11's own messages named neither the
subcommand nor, for a surplus word, which one it was, and added a second line."""
import os
import subprocess

import pytest

from runner_helpers import CADRE

SUBCOMMANDS = ("version, run, bench, netem, ps-server, k8s, server, users, submit, jobs, deploy, "
               "score, serve")

USAGE_ERRORS = [
    (["version", "extra"], "cadre version: unexpected argument 'extra' (it takes no arguments)"),
    (["run", "--nodes"], "cadre run: --nodes was given no value; it takes a number"),
    (["run", "-n", "abc", "--", "true"], "cadre run: --nodes takes a number, not 'abc'"),
    (["run", "--grace"], "cadre run: --grace was given no value; it takes a number"),
    (["run", "-q=3", "--", "true"], "cadre run: -q takes no value, got '3'"),
    (["run", "--data-dir"], "cadre run: --data-dir was given no value; it takes a folder"),
    ([], "cadre: a subcommand is required: " + SUBCOMMANDS),
    (["rn"], "cadre: unknown subcommand 'rn' (did you mean run?); one of: " + SUBCOMMANDS),
    (["bench"], "cadre bench: a subcommand is required: allreduce, ps, server"),
    (["bench", "alreduce"],
     "cadre bench: unknown subcommand 'alreduce' (did you mean allreduce?); one of: allreduce, "
     "ps, server"),
    (["bench", "allreduce"], "cadre bench allreduce: --ranks is required"),
    (["bench", "allreduce", "-n", "2", "--transport", "udp"],
     "cadre bench allreduce: --transport: must be one of shm, tcp, got 'udp'"),
    (["bench", "ps", "--servers", "0"], "cadre bench ps: --servers: must be 1..64, got 0"),
    (["bench", "server", "--clients"],
     "cadre bench server: --clients was given no value; it takes a number"),
    # Refused after parsing: these were "cadre: InvalidArgument: bench allreduce: ...".
    (["bench", "allreduce", "-n", "2", "--sizes", "4Q"],
     "cadre bench allreduce: --sizes item '4Q' is not a byte count (a multiple of 4, like 4096 "
     "or 16M)"),
    (["bench", "ps", "--sizes", "1T"],
     "cadre bench ps: --sizes '1T' is not a size like 4K, 256K, 64M (4 B to 1 GiB)"),
    (["netem"], "cadre netem: a subcommand is required: exec, sweep"),
    (["netem", "exec", "--link", "1gbit"], "cadre netem exec: the argument command is required"),
    # Checked while parsing: these were "cadre: InvalidArgument: link spec ...", and a timeout
    # of -1 or nan was taken as none.
    (["netem", "exec", "--link", "1gbt", "--", "true"],
     "cadre netem exec: --link: link spec \"1gbt\": rate \"1gbt\" has unknown unit \"gbt\" "
     "(use bit, kbit, mbit, gbit or tbit)"),
    (["netem", "exec", "--link", "1gbit", "--job-id", "../x", "--", "true"],
     "cadre netem exec: --job-id: job id '../x' must be 1..40 characters of [A-Za-z0-9_.-]"),
    (["netem", "exec", "--link", "1gbit", "--timeout", "nan", "--", "true"],
     "cadre netem exec: --timeout: must be above 0 and at most 30000000 seconds, got 'nan'"),
    (["netem", "exec", "--link", "1gbit", "--timeout", "-1", "--", "true"],
     "cadre netem exec: --timeout: must be above 0 and at most 30000000 seconds, got '-1'"),
    (["netem", "sweep", "extra"],
     "cadre netem sweep: unexpected argument 'extra' (it takes no arguments)"),
    # CLI::PositiveNumber printed its bound, the largest double, in 300 digits.
    (["ps-server", "--workers", "0"], "cadre ps-server: --workers: must be above 0, got 0"),
    (["ps-server", "--worker-timeout", "0"],
     "cadre ps-server: --worker-timeout: must be 0.001..30000000, got 0"),
    (["k8s", "render"], "cadre k8s render: the argument manifest is required"),
    (["k8s", "render", "a.yaml", "b.yaml", "c.yaml"],
     "cadre k8s render: unexpected argument 'b.yaml' (it takes only manifest)"),
    (["server", "--slots", "many"], "cadre server: --slots takes a number, not 'many'"),
    (["users", "frob"], "cadre users: unknown subcommand 'frob'; one of: add, token, revoke, plan"),
    (["users", "add", "ada"], "cadre users add: --plan is required"),
    (["users", "add", "ada", "--plan"], "cadre users add: --plan was given no value; it takes a value"),
    (["submit"], "cadre submit: the argument manifest is required"),
    (["jobs", "get", "a", "b"], "cadre jobs get: unexpected argument 'b' (it takes only id)"),
    (["jobs", "--server"], "cadre jobs: --server was given no value; it takes a URL"),
    (["deploy", "training-1", "--timeout", "0"],
     "cadre deploy: --timeout: must be 0.1..1000000, got 0"),
    (["score", "deployment-1"], "cadre score: the argument input is required"),
    (["task", "--engine"], "cadre task: --engine was given no value; it takes a value"),
    # An empty --server or --token meant the default server or $CADRE_TOKEN; a malformed URL
    # was tried as one.
    (["jobs", "--server", "", "list"],
     "cadre jobs: --server was given an empty value; it takes a URL"),
    (["score", "d-1", "in.json", "--server="],
     "cadre score: --server was given an empty value; it takes a URL"),
    (["submit", "m.yaml", "--token", ""],
     "cadre submit: --token was given an empty value; it takes a token"),
    (["deploy", "t-1", "--server", "127.0.0.1:8900"],
     "cadre deploy: --server: must be http://HOST:PORT, got '127.0.0.1:8900'"),
    (["jobs", "list", "--server", "http://h:99999"],
     "cadre jobs list: --server: port must be 1..65535, got 'http://h:99999'"),
    (["jobs", "list", "--server", "http://h:x"],
     "cadre jobs list: --server: must be http://HOST:PORT, got 'http://h:x'"),
    # 0 was the "not given" value: --slots 0 meant this machine's cores.
    (["server", "--slots", "0"], "cadre server: --slots must be 1..1048576, got 0"),
    (["server", "--backend", "slurm", "--queue-timeout", "nan"],
     "cadre server: --queue-timeout must be 0..31536000 seconds, got nan"),
    # An empty value that meant "not given", NaN that CLI::Range let through, a folder read as
    # an empty payload, a meaningless measurement, 0 that meant "by size".
    (["deploy", "t-1", "--name", ""], "cadre deploy: --name was given an empty value; it takes a name"),
    (["deploy", "t-1", "--update", ""],
     "cadre deploy: --update was given an empty value; it takes an id"),
    (["deploy", "t-1", "--timeout", "nan"], "cadre deploy: --timeout: must be 0.1..1000000, got nan"),
    (["score", "d-1", "."],
     "cadre score: the argument input is a folder; give the payload's file, or - for stdin"),
    (["submit", ""], "cadre submit: the argument manifest is empty; give the job's manifest (.yaml)"),
    (["score", "d-1", ""],
     "cadre score: the argument input is empty; give the payload's file, or - for stdin"),
    (["ps-server", "--address", "", "--workers", "2"],
     "cadre ps-server: --address was given an empty value; it takes an address (HOST:PORT)"),
    (["ps-server", "--step-timeout", "nan"],
     "cadre ps-server: --step-timeout: must be 0.001..30000000, got nan"),
    (["bench", "server", "--duration", "nan"],
     "cadre bench server: --duration must be 0.001..86400, got nan"),
    (["bench", "server", "--server", ""],
     "cadre bench server: --server was given an empty value; it takes a URL"),
    (["bench", "server", "--grace", "-1"], "cadre bench server: --grace must be 0..86400, got -1"),
    (["bench", "allreduce", "-n", "2", "--iters", "0"],
     "cadre bench allreduce: --iters must be at least 1 (leave it out: chosen by size), got 0"),
    (["run", "--backend", "slurm", "--partition", "", "--", "true"],
     "cadre run: --partition was given an empty value; it takes a name"),
    (["run", "--backend", "mpi", "--hostfile=", "--", "true"],
     "cadre run: --hostfile was given an empty value; it takes a file"),
    (["server", "--store-host", ""], "cadre server: --store-host was given an empty value; it takes a host"),
    (["server", "--backend", "kubernetes", "--namespace", ""],
     "cadre server: --namespace was given an empty value; it takes a name"),
    (["k8s", "render", "x.yaml", "-o", ""], "cadre k8s render: -o was given an empty value; it takes a file"),
    # A folder where a file goes: "cannot rename", and a hostfile that "lists no hosts".
    (["k8s", "render", os.path.join(os.path.dirname(__file__), "..", "examples", "fashion_mnist",
                                     "horovod.yaml"), "--image", "i", "-o", "/"],
     "cadre k8s render: -o / is a folder; give the file to write"),
    (["run", "--backend", "mpi", "--hostfile", "/", "--", "true"],
     "cadre run: --hostfile / is a folder; give the file that lists the hosts; nothing was started"),
    # A value given to a flag was taken as the flag given (--quiet=false as --quiet).
    (["run", "--quiet=3", "--", "true"], "cadre run: --quiet takes no value, got '3'"),
    (["jobs", "logs", "x", "--follow=false"],
     "cadre jobs logs: --follow takes no value, got 'false'"),
    # What a line repeats from argv is quoted and escaped.
    (["version", "a\x1bb"], "cadre version: unexpected argument 'a\\x1bb' (it takes no arguments)"),
]


@pytest.mark.parametrize("args,line", USAGE_ERRORS)
def test_a_usage_error_is_one_line_naming_the_subcommand(tmp_path, args, line):
    proc = subprocess.run([CADRE, *args], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [line], proc.stderr
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no job directory, no server data, nothing run


@pytest.mark.parametrize("server,token,line", [
    ("", "t", "cadre jobs list: CADRE_SERVER must be http://HOST:PORT, got '' (unset it for the "
              "default)"),
    ("http://h:0", "t", "cadre jobs list: CADRE_SERVER port must be 1..65535, got 'http://h:0' "
                        "(unset it for the default)"),
    (None, "", "cadre jobs list: CADRE_TOKEN is set but empty: set it to your token (from `cadre "
               "users add`) or pass --token"),
])
def test_an_empty_or_malformed_variable_is_named(tmp_path, server, token, line):
    env = {k: v for k, v in os.environ.items() if k not in ("CADRE_SERVER", "CADRE_TOKEN")}
    if server is not None:
        env["CADRE_SERVER"] = server
    env["CADRE_TOKEN"] = token
    proc = subprocess.run([CADRE, "jobs", "list"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [line], proc.stderr


SERVE = os.path.join(os.path.dirname(CADRE), "cadre-serve")


@pytest.mark.skipif(not os.path.exists(SERVE), reason="cadre-serve is not built (no libtorch)")
@pytest.mark.parametrize("args,line", [
    ([], "cadre serve: the argument model_dir is required (the model folder saved by "
         "cadre.save_model)"),
    (["model", "other"], "cadre serve: unexpected argument 'other' (it takes only model_dir)"),
    (["model", "--frob"], "cadre serve: unknown option --frob"),
    (["model", "--port", "70000"], "cadre serve: --port: must be 0..65535, got 70000"),
    (["model", "--port"], "cadre serve: --port was given no value; it takes a number"),
])
def test_a_usage_error_of_serve_is_one_line_naming_it(tmp_path, args, line):
    # `cadre serve` execs cadre-serve, which parses the options itself.
    proc = subprocess.run([CADRE, "serve", *args], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [line], proc.stderr


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["bench", "ps", "--help"],
                                  ["users", "add", "--help"]])
def test_help_is_still_help(args):
    proc = subprocess.run([CADRE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout and proc.stderr == ""
