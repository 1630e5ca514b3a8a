"""The same operation in plain PyTorch: all_to_all_single of the partials
and the LSEs (HEAD scatter; an all_gather for TOKEN and NONE), then the
merge in fp32. The baseline of the tests and of the example, and a
readable statement of the math (include/nccl_dcp.h):

    l_s = lse_s with NaN and +inf read as -inf (and -inf where the row is
          empty on rank s: seq_lens / query_start_loc)
    m   = max_s l_s (0 if all are -inf),  w_s = base^(l_s - m),  W = sum_s w_s
    out = sum_s (w_s / W) o_s  (0 if W == 0; a source with w_s == 0 is skipped, never multiplied)
    lse = m + log_base(W)      (-inf if W == 0)

accumulated in fp32 in source order s = 0..cp-1. Where the merges go is
the scatter mode: HEAD rank r keeps heads [r*Hl, (r+1)*Hl) of every row;
TOKEN rank r keeps every head of rows [start_r, start_r + n_r) (even split:
the first B % cp ranks take one row more; or the call's row_counts); NONE
every rank keeps everything.
"""

import torch
import torch.distributed as dist

from . import _abi
from .context import lse_base_code

# One unit of rounding of each dtype, relative: the tolerance of a compare
# (the library's own reference uses the same, src/reference.cc).
_EPSILON = {torch.bfloat16: 1.0 / 128, torch.float16: 1.0 / 1024, torch.float32: 1e-5}


def merge(parts, lses, lse_base, dtype=torch.float32):
    """Merges cp sources: parts [cp, B, Hl, D], lses [cp, B, Hl] (source
    first). Returns (out [B, Hl, D], lse [B, Hl]) in dtype: float32 as the
    library accumulates, or float64 for an oracle."""
    base2 = lse_base_code(lse_base) == _abi.LSE_BASE_2
    exp = torch.exp2 if base2 else torch.exp
    log = torch.log2 if base2 else torch.log
    l = lses.to(dtype)
    # No host tensor: the reference also runs inside CUDA graph capture.
    l = torch.where(torch.isnan(l) | (l == float("inf")), torch.full_like(l, float("-inf")), l)
    m = l.amax(dim=0)
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    w = exp(l - m)
    total = torch.zeros_like(m)
    for s in range(l.shape[0]):
        total = total + w[s]
    weight = torch.where(total > 0, w / total, torch.zeros_like(w))
    out = torch.zeros(parts.shape[1:], dtype=dtype, device=parts.device)
    for s in range(parts.shape[0]):
        ws = weight[s].unsqueeze(-1)
        out = torch.where(ws != 0, out + ws * parts[s].to(dtype), out)
    lse = torch.where(total > 0, m + log(total), torch.full_like(m, float("-inf")))
    return out, lse


def exchange(partial_out, partial_lse, local_heads, group=None):
    """The all-to-all: every rank sends heads [p*Hl, (p+1)*Hl) to rank p.
    partial_out [B, cp*Hl, D] or [B, cp, Hl, D] (any strides), partial_lse
    [B, cp*Hl] or [B, cp, Hl]. Returns (parts [cp, B, Hl, D], lses [cp, B, Hl]),
    source first."""
    cp = dist.get_world_size(group)
    batch, d = partial_out.shape[0], partial_out.shape[-1]
    send = partial_out.reshape(batch, cp, local_heads, d).transpose(0, 1).contiguous()
    send_lse = partial_lse.reshape(batch, cp, local_heads).transpose(0, 1).float().contiguous()
    parts, lses = torch.empty_like(send), torch.empty_like(send_lse)
    dist.all_to_all_single(parts, send, group=group)
    dist.all_to_all_single(lses, send_lse, group=group)
    return parts, lses


def empty_rows(batch, seq_lens, query_start_loc):
    """bool [B], on seq_lens' device: the rows that are empty on this rank
    (src/device/merge.h rowIsEmpty): outside [qsl[0], qsl[numSeqs]), or in
    a sequence whose local length is <= 0; sequence i holds rows
    [qsl[i], qsl[i+1]) (the last sequence starting at or before the row)."""
    qsl = query_start_loc.to(torch.int64)
    n = seq_lens.shape[0]
    rows = torch.arange(batch, device=qsl.device, dtype=torch.int64)
    seq = (torch.searchsorted(qsl[:n].contiguous(), rows, right=True) - 1).clamp(0, n - 1)
    outside = (rows < qsl[0]) | (rows >= qsl[n])
    return outside | (seq_lens.to(qsl.device)[seq] <= 0)


def row_starts(batch, cp, row_counts=None):
    """[start_0, ..., start_cp] of the TOKEN split: row_counts (a list, or a
    tensor read back to the host), else the even split."""
    if row_counts is None:
        counts = [batch // cp + (p < batch % cp) for p in range(cp)]
    else:
        counts = [int(n) for n in (row_counts.tolist() if hasattr(row_counts, "tolist") else row_counts)]
    starts = [0]
    for n in counts:
        starts.append(starts[-1] + n)
    return starts


def masked_lse(partial_lse, local_heads, seq_lens=None, query_start_loc=None):
    """partial_lse as fp32 [B, cp*Hl] (exact for bf16 / fp16), -inf on the
    rows that seq_lens / query_start_loc make empty on this rank."""
    batch = partial_lse.shape[0]
    lse = partial_lse.reshape(batch, -1).float()
    if seq_lens is not None:
        empty = empty_rows(batch, seq_lens, query_start_loc).to(lse.device)
        lse = torch.where(empty.unsqueeze(1), torch.full_like(lse, float("-inf")), lse)
    return lse


def sources(partial_out, partial_lse, local_heads, scatter="head", row_counts=None, seq_lens=None,
            query_start_loc=None, group=None):
    """The cp sources of this rank's outputs, source first: (parts [cp,
    rows, heads, D], lses [cp, rows, heads] fp32) of the scatter mode (HEAD:
    B rows of Hl heads, by exchange(); TOKEN: this rank's n_r rows of all H
    heads; NONE: B rows of H heads, both by an all_gather in fp32, exact)."""
    lse = masked_lse(partial_lse, local_heads, seq_lens, query_start_loc)
    if scatter == "head":
        return exchange(partial_out, lse, local_heads, group)
    cp, rank = dist.get_world_size(group), dist.get_rank(group)
    batch, d = partial_out.shape[0], partial_out.shape[-1]
    po = partial_out.reshape(batch, cp * local_heads, d).float().contiguous()
    all_po = [torch.empty_like(po) for _ in range(cp)]
    all_lse = [torch.empty_like(lse) for _ in range(cp)]
    dist.all_gather(all_po, po, group=group)
    dist.all_gather(all_lse, lse.contiguous(), group=group)
    parts, lses = torch.stack(all_po), torch.stack(all_lse)
    if scatter == "token":
        starts = row_starts(batch, cp, row_counts)
        parts, lses = parts[:, starts[rank]:starts[rank + 1]], lses[:, starts[rank]:starts[rank + 1]]
    elif scatter != "none":
        raise ValueError(f"scatter must be 'head', 'token' or 'none', got {scatter!r}")
    return parts, lses


def a2a_lse_reduce(partial_out, partial_lse, local_heads, lse_base, group=None, scatter="head", row_counts=None,
                   seq_lens=None, query_start_loc=None):
    """The whole operation in PyTorch: exchange, then merge. Returns
    (out in partial_out's dtype, lse fp32) of the scatter mode: HEAD
    [B, Hl, D], TOKEN [n_r, H, D], NONE [B, H, D]."""
    parts, lses = sources(partial_out, partial_lse, local_heads, scatter, row_counts, seq_lens, query_start_loc,
                          group)
    out, lse = merge(parts, lses, lse_base)
    return out.to(partial_out.dtype), lse


def count_mismatches(out, out_lse, want_out, want_lse):
    """Elements of (out, out_lse) that differ from the fp32 reference
    (want_out, want_lse) by more than the dtype's rounding; a non-finite out
    always counts. Returns a 0-dim int64 tensor (no host sync)."""
    eps = _EPSILON[out.dtype]
    got, want = out.float(), want_out.float()
    bad = ~(torch.isfinite(got) & ((got - want).abs() <= 1e-5 + eps * want.abs()))
    count = bad.sum()
    if out_lse is not None:
        both_inf = torch.isinf(want_lse) & (out_lse == want_lse)
        close = (torch.isfinite(out_lse) & torch.isfinite(want_lse)
                 & ((out_lse - want_lse).abs() <= 1e-5 * (1 + want_lse.abs())))
        count = count + (~(both_inf | close)).sum()
    return count
