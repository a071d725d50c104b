#!/bin/bash
# Parameter servers on emulated 1 Gbit/s links, two builds of cadre interleaved (docs/benchmarks.md,
# parameter servers): per round, `cadre bench ps --emulate-network` of each build in turn, with
# the load average before each run and the CPU time (user + system, all processes of the run:
# servers, workers and the emulator's set-up) after it.
#   bench/ps_compare.sh BEFORE/cadre AFTER/cadre [ROUNDS] [extra `cadre bench ps` options]
# Needs root (network namespaces). Default options: 64 MiB, 1-2 servers x 1-2 workers, 5 steps.
set -e
before=$1 after=$2 rounds=${3:-3}
shift 3 || shift $#
opts=("$@")
[ ${#opts[@]} -gt 0 ] || opts=(--sizes 64M --servers 1 2 --workers 1 2 --iterations 5)
if [ ! -x "$before" ] || [ ! -x "$after" ]; then
  echo "usage: $0 BEFORE/cadre AFTER/cadre [ROUNDS] [options]" >&2
  exit 2
fi
TIMEFORMAT="cpu user %U s, system %S s, wall %R s"
for round in $(seq 1 "$rounds"); do
  for which in before after; do
    bin=${!which}
    echo "### round $round $which ($bin) $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    time "$bin" bench ps --emulate-network 1gbit "${opts[@]}"
  done
done
