"""The header's merge (include/nccl_dcp.h) in float64 loops, written from
its formula and sharing nothing with nccl_dcp: the oracle of the CPU tests
that run over gloo (test_dropins.py, test_reference_dist.py).

NaN and +inf LSEs count as empty (-inf); a row empty everywhere merges to
zeros with LSE -inf."""

import math

import torch


def merge(parts, lses, base):
    """parts[s] [B, J, D] and lses[s] [B, J]: what source s holds for the J
    merged heads of one rank; base 2 or "e". Returns (out [B, J, D], lse
    [B, J]) in float64."""
    exp = (lambda x: 2.0**x) if base == 2 else math.exp
    log = math.log2 if base == 2 else math.log
    batch, heads, d = parts[0].shape
    out = torch.zeros(batch, heads, d, dtype=torch.float64)
    lse = torch.zeros(batch, heads, dtype=torch.float64)
    for b in range(batch):
        for j in range(heads):
            ls = [float(pl[b, j]) for pl in lses]
            ls = [-math.inf if (math.isnan(x) or x == math.inf) else x for x in ls]
            m = max(ls)
            m = 0.0 if m == -math.inf else m
            w = [exp(x - m) for x in ls]
            total = sum(w)
            lse[b, j] = m + log(total) if total > 0 else -math.inf
            for s, ws in enumerate(w):
                if total > 0 and ws > 0:
                    out[b, j] += ws / total * parts[s][b, j].double()
    return out, lse
