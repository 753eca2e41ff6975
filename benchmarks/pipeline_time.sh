#!/usr/bin/env bash
# Wall time and peak memory of a pipeline from an empty results/, then the job-seconds per rule
# (benchmarks/pipeline_jobs.py). Prints JSON. Memory: snakemake and all its jobs (`dpaudit`, `-m reproduce`), sampled
# every second, summed two ways: RSS (each process's pages, the libraries they share counted once per process: an
# upper bound) and PSS (a shared page split between the processes that map it: what they hold together). steal_seconds:
# the CPU time the hypervisor took from this machine meanwhile, all cores together (a shared host's other guests).
# Usage: bash benchmarks/pipeline_time.sh [snakemake args]            # the default preset, in the repository
#        bash benchmarks/pipeline_time.sh --directory presets/mnist --configfile configs/mnist.yaml   # a preset apart
set -u
cd "$(dirname "$0")/.."
folder=.
previous=""
for argument in "$@"; do  # the preset's own folder, where its results/ and its log go
  [ "$previous" = "--directory" ] && folder=$argument
  previous=$argument
done
rm -rf "$folder/results"
mkdir -p "$folder"
steal() {  # CPU seconds the hypervisor took from this machine since boot, all cores together ("null": no /proc/stat)
  awk -v tick="$(getconf CLK_TCK)" '/^cpu / {printf "%.0f", $9 / tick; found = 1} END {if (!found) printf "null"}' \
    /proc/stat 2>/dev/null || printf null
}
steal_start=$(steal)
snakemake --cores all "$@" > "$folder/results.log" 2>&1 &
pid=$!
start=$(date +%s)
peak=0
peak_pss=0
while kill -0 "$pid" 2>/dev/null; do
  pids=$(ps -eo pid=,args= | grep -E "snakemake|dpaudit|-m reproduce" | grep -v grep | awk '{print $1}')
  total=$(for p in $pids; do awk '/^Rss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null; done | awk '{s+=$1} END {print s+0}')
  shared=$(for p in $pids; do awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null; done | awk '{s+=$1} END {print s+0}')
  [ "$total" -gt "$peak" ] && peak=$total
  [ "$shared" -gt "$peak_pss" ] && peak_pss=$shared
  sleep 1
done
wait "$pid"
rc=$?
steal_end=$(steal)
stolen=null
[ "$steal_start" != null ] && [ "$steal_end" != null ] && stolen=$(( steal_end - steal_start ))
printf '{"returncode": %d, "wall_seconds": %d, "peak_rss_mb": %d, "peak_pss_mb": %d, "cores": %d, "steal_seconds": %s,\n "jobs":\n' \
  "$rc" "$(( $(date +%s) - start ))" "$(( peak / 1024 ))" "$(( peak_pss / 1024 ))" "$(nproc)" "$stolen"
python benchmarks/pipeline_jobs.py "$folder/results.log"
echo "}"
