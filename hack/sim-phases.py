#!/usr/bin/env python3
"""sim-phases.py DIR: where faas-gpu's GPU-seconds above the whole-GPU bound
fall, serving windows or idle ones (docs/evaluation.md, "Where the excess is:
serving phases, not idle ones").

DIR holds one folder per suite, each written by
    faas-gpu simulate -quiet -suite SUITE/PREFIX -policies faas-gpu -out DIR/SUITE
(PREFIX the suite's workload prefix, so that every workload's series is
written). A run's seconds are cut into the bounds' 10-s windows; a window is
idle where the requests offered in it are under 5 % of the run's
90th-percentile window; an on/off run has at least 15 % idle windows.
"""
import csv
import glob
import os
import statistics
import sys

WINDOW = 10  # seconds, as sim.LowerBound's windows
IDLE = 0.05  # of the 90th-percentile window's requests
ONOFF = 0.15  # share of idle windows


def runs(root):
    for suite_dir in sorted(glob.glob(os.path.join(root, "*", ""))):
        for table in glob.glob(os.path.join(suite_dir, "*-suite.csv")):
            for row in csv.DictReader(open(table)):
                series = os.path.join(suite_dir, row["workload"] + "-series.csv")
                if row["policy"] != "faas-gpu" or not os.path.exists(series):
                    continue
                secs = [r for r in csv.DictReader(open(series)) if r["policy"] == "faas-gpu"]
                yield row, secs


def measure(row, secs):
    windows = []
    for i in range(0, len(secs), WINDOW):
        w = secs[i:i + WINDOW]
        windows.append((sum(float(s["offered_rps"]) for s in w), sum(float(s["gpus_used"]) for s in w), len(w)))
    offered = sorted(w[0] for w in windows)
    p90 = offered[int(0.9 * len(offered))] or 1
    idle = [w for w in windows if w[0] < IDLE * p90]
    busy = [w for w in windows if w[0] >= IDLE * p90]
    bound_mean = float(row["whole_gpu_bound_seconds"]) / len(secs)
    return dict(
        x=float(row["x_bound"]),
        used=sum(w[1] for w in windows),
        bound=float(row["whole_gpu_bound_seconds"]),
        bound_mean=bound_mean,
        idle_share=len(idle) / len(windows),
        idle_gpu_s=sum(w[1] for w in idle),
        # An upper estimate of what the bound's minimum-replica floor needs.
        idle_above_bound=max(0.0, sum(w[1] for w in idle) - bound_mean * sum(w[2] for w in idle)),
        gpus_idle=sum(w[1] for w in idle) / max(1, sum(w[2] for w in idle)),
        gpus_busy=sum(w[1] for w in busy) / max(1, sum(w[2] for w in busy)),
    )


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: sim-phases.py DIR (see the header for how DIR is written)")
    ms = [measure(row, secs) for row, secs in runs(sys.argv[1])]
    if not ms:
        sys.exit(f"sim-phases.py: no faas-gpu series under {sys.argv[1]}")
    excess = sum(m["used"] - m["bound"] for m in ms)
    dear = [m for m in ms if m["x"] > 1.6]
    onoff = [m for m in ms if m["idle_share"] >= ONOFF]
    print(f"{len(ms)} runs, {len(dear)} above x1.6; {len(onoff)} on/off "
          f"({sum(m['x'] > 1.6 for m in onoff)} of them above x1.6)")
    for name, group in (("all runs", ms), ("above x1.6", dear)):
        ex = sum(m["used"] - m["bound"] for m in group)
        print(f"{name}: idle windows' GPU-s are {100 * sum(m['idle_gpu_s'] for m in group) / ex:.1f} % of the excess")
    above = sum(m["idle_above_bound"] for m in onoff)
    print(f"on/off runs: idle windows above the mean bound {above:.0f} GPU-s = "
          f"{100 * above / sum(m['used'] for m in onoff):.1f} % of their GPU-s, {100 * above / excess:.1f} % of all runs' excess")
    ratio = sorted(m["gpus_idle"] / m["gpus_busy"] for m in onoff if m["gpus_busy"] > 0)
    if ratio:
        print(f"on/off runs: GPUs idle / serving {ratio[0]:.2f}-{ratio[-1]:.2f} (median {statistics.median(ratio):.2f})")
    print(f"above x1.6: serving GPUs / mean bound, median {statistics.median(m['gpus_busy'] / m['bound_mean'] for m in dear):.2f}")


if __name__ == "__main__":
    main()
