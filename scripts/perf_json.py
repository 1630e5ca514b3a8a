"""Reads a dcp_a2a_lse_reduce_perf -J file, either format, into one shape.

Today's files are nccl-tests' JSON: results[] with size and out_of_place
{time, alg_bw, bus_bw, nwrong} for the fused call, our fields beside them in
snake_case (rows, protocol, baseline{...}, ideal_time, ...), time the mean
per call. Files written before (docs/data/*.json) had a camelCase rows[]
array (fusedUs, baseUs, ...) whose times were the median. Both come back as

    meta: mode, n_ranks, dtype, head_dim, local_heads, device, protocol,
          scatter, none_algo, wire, staged_gather, registered_out, baseline, baseline2, nccl_version,
          statistic, commit
    rows: [{rows, bytes, protocol, fused_us, fused_median_us, base_us, base2_us,
            base2_median_us, ideal_us, floor_us, fused_wrong, base_wrong, base2_wrong,
            unchecked}]  (0 / -1 where not measured or not checked; unchecked: a call
            was timed but its results not checked, -c 0; the old files' median is
            their only time)
"""

import json


def _time(timing):
    return (timing or {}).get("time") or 0.0


def _wrong(timing):
    n = (timing or {}).get("nwrong")
    return -1 if n is None else int(n)


def _unchecked(n_rows, timings):
    """A call timed (its timing there) with nwrong null: the run's -c 0
    (a row of 0 rows has nothing to check)."""
    return n_rows > 0 and any(t is not None and t.get("nwrong") is None for t in timings)


def _new_rows(report):
    return [{"rows": r["rows"], "bytes": r["size"], "protocol": r.get("protocol", ""),
             "fused_us": _time(r.get("out_of_place")),
             "fused_median_us": (r.get("out_of_place") or {}).get("median_time") or 0.0,
             "base_us": _time(r.get("baseline")),
             "base2_us": _time(r.get("baseline2")),
             "base2_median_us": (r.get("baseline2") or {}).get("median_time") or 0.0,
             "ideal_us": r.get("ideal_time") or 0.0,
             "floor_us": r.get("floor_time") or 0.0, "fused_wrong": _wrong(r.get("out_of_place")),
             "base_wrong": _wrong(r.get("baseline")), "base2_wrong": _wrong(r.get("baseline2")),
             "unchecked": _unchecked(r["rows"], (r.get("out_of_place"), r.get("baseline"), r.get("baseline2")))}
            for r in report["results"]]


def _old_rows(report):
    return [{"rows": r["rows"], "bytes": r["bytes"], "protocol": r.get("protocolChosen", ""),
             "fused_us": r.get("fusedUs") or 0.0, "fused_median_us": r.get("fusedUs") or 0.0,
             "base_us": r.get("baseUs") or 0.0,
             "base2_us": r.get("base2Us") or 0.0, "base2_median_us": r.get("base2Us") or 0.0,
             "ideal_us": r.get("idealUs") or 0.0,
             "floor_us": r.get("floorUs") or 0.0, "fused_wrong": r.get("fusedWrong", -1),
             "base_wrong": r.get("baseWrong", -1), "base2_wrong": r.get("base2Wrong", -1),
             "unchecked": r["rows"] > 0 and r.get("fusedWrong", -1) < 0} for r in report["rows"]]


def parse(report):
    """(meta, rows) of a loaded -J document."""
    old = isinstance(report.get("rows"), list)
    get = (lambda new, before: report.get(before)) if old else (lambda new, before: report.get(new))
    meta = {"mode": report.get("mode"), "n_ranks": get("n_ranks", "nRanks"), "dtype": report.get("dtype"),
            "head_dim": get("head_dim", "headDim"), "local_heads": get("local_heads", "localHeads"),
            "device": report.get("device"), "protocol": report.get("protocol"),
            "scatter": report.get("scatter", "head"), "none_algo": report.get("none_algo"),
            "wire": report.get("wire", "native"), "staged_gather": report.get("staged_gather", False),
            "registered_out": report.get("registered_out", False),
            "baseline": report.get("baseline"),
            "baseline2": report.get("baseline2"),
            "nccl_version": report.get("ncclVersion") if old else report.get("nccl_version"),
            "statistic": "median" if old else report.get("time_statistic", "mean"),
            "commit": report.get("commit", "")}
    return meta, _old_rows(report) if old else _new_rows(report)


def wrong_count(row):
    """Wrong elements of a row, fused call and both baselines ("not measured", -1, counts none)."""
    return max(row["fused_wrong"], 0) + max(row["base_wrong"], 0) + max(row["base2_wrong"], 0)


def load(path):
    with open(path, encoding="utf-8") as f:
        return parse(json.load(f))
