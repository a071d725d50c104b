#!/bin/sh
# The DDL-mode benchmark matrix of docs/benchmarks.md: flat ring vs hierarchical allreduce at
# 2, 3 and 4 emulated hosts x 2 slots, on 1 Gbit/s links without and with 1 ms of delay.
# Needs root (network namespaces) and a build: cmake --build build --target cadre ddl_allreduce_bench
set -e
cd "$(dirname "$0")/.."
echo "=== $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)"
for link in 1gbit 1gbit,1ms; do
  for h in 2 3 4; do
    echo "### hosts $h link $link"
    build/cadre netem exec --hosts "$h" --link "$link" -- \
      build/bench/ddl_allreduce_bench --slots 2 --seconds 1
  done
done
echo "=== end $(date -u +%H:%M)"
