"""Job-seconds per rule of one Snakemake run, from its log (the default profile prints each job's start and end
with a timestamp); prints JSON. With N cores the wall time is at least the job-seconds over N.

Usage: python benchmarks/pipeline_jobs.py results.log [--top 15]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import re

_STAMP = re.compile(r"\[(\w{3} \w{3}\s+\d+ [\d:]+ \d{4})\]")
_RULE = re.compile(r"(?:local)?rule (\w+):")
_JOBID = re.compile(r"\s+jobid: (\d+)")
_WILDCARDS = re.compile(r"\s+wildcards: (.*)")
_FINISHED = re.compile(r"Finished jobid: (\d+)")


def job_seconds(lines) -> dict[str, tuple[str, float]]:
    """jobid → (rule and wildcards, seconds from its start to its end) of every finished job."""
    stamp = started = rule = last = None
    starts, names, seconds = {}, {}, {}
    for line in lines:
        if match := _STAMP.match(line):
            stamp = datetime.datetime.strptime(" ".join(match.group(1).split()), "%a %b %d %H:%M:%S %Y")
        elif match := _RULE.match(line):
            rule, started = match.group(1), stamp
        elif (match := _JOBID.match(line)) and rule:
            last = match.group(1)
            starts[last], names[last], rule = started, rule, None
        elif (match := _WILDCARDS.match(line)) and last in names:
            names[last] += f" [{match.group(1)}]"
        elif (match := _FINISHED.search(line)) and match.group(1) in starts:
            job = match.group(1)
            seconds[job] = (names[job], (stamp - starts[job]).total_seconds())
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--top", type=int, default=15, help="how many of the longest jobs to list")
    args = parser.parse_args()
    with open(args.log, encoding="utf-8") as handle:
        jobs = job_seconds(handle)
    per_rule = collections.Counter()
    for name, seconds in jobs.values():
        per_rule[name.split(" ")[0]] += seconds
    longest = sorted(jobs.values(), key=lambda job: -job[1])[: args.top]
    print(
        json.dumps(
            {
                "jobs": len(jobs),
                "job_seconds": round(sum(per_rule.values())),
                "job_seconds_per_rule": {rule: round(s) for rule, s in per_rule.most_common()},
                "longest_jobs": {name: round(s) for name, s in longest},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
