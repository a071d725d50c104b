#!/bin/sh
# The DDL-mode benchmark matrix of docs/benchmarks.md: cadre's flat choice (same-host messages
# over shared memory) vs hierarchical allreduce at 2, 3 and 4 emulated hosts x 2 slots, on
# 1 Gbit/s links without and with 1 ms of delay.
#   ROUNDS=3 rounds of the whole matrix, one after the other (default 1);
#   HOSTS="2" the host counts (default "2 3 4");
#   further arguments go to every ddl_allreduce_bench, e.g. --flat both to add the flat baseline
#   over TCP inside the host.
# Needs root (network namespaces) and a build: cmake --build build --target cadre ddl_allreduce_bench
set -e
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-1}
echo "=== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
round=1
while [ "$round" -le "$rounds" ]; do
  for link in 1gbit 1gbit,1ms; do
    for h in ${HOSTS:-2 3 4}; do
      echo "### round $round hosts $h link $link $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
      build/cadre netem exec --hosts "$h" --link "$link" -- \
        build/bench/ddl_allreduce_bench --slots 2 --seconds 1 "$@"
    done
  done
  round=$((round + 1))
done
echo "=== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
