"""The engine drop-ins (nccl_dcp.vllm, nccl_dcp.flashinfer) on CPU: two
processes over gloo. Each case's result is compared with a float64 oracle
written from the header's formula over every rank's inputs, gathered:

  - the CPU path (CPU tensors run nccl_dcp.reference), every dtype, both
    LSE bases, with and without the merged LSE (float32, as vLLM returns
    it), the -inf / NaN / +inf corner cases, vLLM's seq_lens /
    query_start_loc (empty shards), FlashInfer's lse_mode (positional, as
    0.7.1 takes it) and any leading dims;
  - the library path's plumbing, with a stand-in for nccl_dcp.Context that
    merges what it is handed as Context reads it: the layout the drop-in
    passes (FlashInfer's [B, heads, cp, D] as a strided view, never a copy),
    the configuration, the cache (one context per group and configuration),
    seq_lens / query_start_loc handed on, Context's errors in the caller's
    argument names;
  - vLLM's single-rank pass-through and both drop-ins' argument checks.
Then, in this process, the context cache on its own: one creation per key
across threads, and close() closing every context when one raises.

The GPU suite (gpu_torchrun.py, dropin/*) runs them on the real library."""

import math
import os
import socket

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import oracle64  # noqa: E402 (needs torch)

WORLD, HL, D = 2, 3, 16
CASES = [
    "vllm/cpu/float32/base_e/lse", "vllm/cpu/float32/base_2/no_lse", "vllm/cpu/bfloat16/base_e/lse",
    "vllm/cpu/bfloat16/base_2/lse_bf16", "vllm/cpu/float16/base_e/no_lse",
    "vllm/library_path/layout_config_cache", "vllm/one_rank_passes_through", "vllm/refuses_bad_shapes",
    "vllm/cpu/float32/base_e/seq_lens", "vllm/cpu/bfloat16/base_2/seq_lens_lse_bf16",
    "vllm/library_path/seq_lens_and_fp32_lse", "vllm/library_path/errors_name_the_callers_arguments",
    "vllm/refuses_bad_arguments", "vllm/library_path/views_the_library_cannot_take_are_copied",
    "flashinfer/cpu/bfloat16/base_2", "flashinfer/cpu/float16/base_e", "flashinfer/cpu/bfloat16/base_e",
    "flashinfer/library_path/strided_view_and_cache", "flashinfer/refuses_bad_arguments",
    "flashinfer/cpu/bfloat16/lse_mode_positional", "flashinfer/refuses_bad_lse_modes",
    "flashinfer/cpu/float16/leading_dims", "flashinfer/library_path/leading_dims",
    "flashinfer/library_path/errors_name_the_callers_arguments",
    "flashinfer/library_path/workspace_makes_its_context",
]


def fill(t, g, rank):
    """Random [B, cp, Hl, ...] partials' LSEs with the header's corner cases
    at rows every rank agrees on: b % 4 == 1 empty everywhere (-inf), b % 4
    == 2 NaN (rank 0, head 1) or +inf (rank 1, head 2), b % 4 == 3 shifted
    by +80. Needs Hl >= 3."""
    t.copy_(torch.rand(t.shape, generator=g) * 8 - 4)
    rows = torch.arange(t.shape[0])
    t[rows % 4 == 1, :, 0] = -math.inf
    t[rows % 4 == 2, :, 1 + rank] = math.nan if rank == 0 else math.inf  # one rank's share of a head empty
    t[rows % 4 == 3] += 80


def gathered(t):
    import torch.distributed as dist
    all_t = [torch.empty_like(t) for _ in range(WORLD)]
    dist.all_gather(all_t, t.contiguous())
    return all_t


EPS = {torch.float32: 1e-5, torch.bfloat16: 1.0 / 128, torch.float16: 1.0 / 1024}


def mismatches(out, want, out_lse=None, want_lse=None):
    """Elements off the float64 oracle by more than the dtype's rounding."""
    got, ref = out.double(), want
    bad = int((~(torch.isfinite(got) & ((got - ref).abs() <= 1e-5 + EPS[out.dtype] * ref.abs()))).sum())
    if out_lse is not None:
        got_lse = out_lse.double()
        both_inf = torch.isinf(want_lse) & (got_lse == want_lse)
        close = torch.isfinite(got_lse) & ((got_lse - want_lse).abs() <= EPS[out_lse.dtype] * (1 + want_lse.abs()))
        bad += int((~(both_inf | close)).sum())
    return bad


def vllm_inputs(batch, dtype, lse_dtype, rank, seed):
    """vLLM's [B, H, D] partials and [B, H] LSEs (H = cp * Hl), the corner cases planted."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    po = torch.randn(batch, WORLD * HL, D, generator=g)
    lse = torch.empty(batch, WORLD, HL)
    fill(lse, g, rank)
    po[~torch.isfinite(lse.reshape(batch, WORLD * HL))] = math.nan  # an empty source's payload: never read
    return po.to(dtype), lse.reshape(batch, WORLD * HL).to(lse_dtype)


def vllm_oracle(po, pl, rank, base):
    """Rank `rank`'s heads [rank*Hl, (rank+1)*Hl) merged over every rank's partials."""
    heads = slice(rank * HL, (rank + 1) * HL)
    return oracle64.merge([p[:, heads] for p in gathered(po)], [l.float()[:, heads] for l in gathered(pl)], base)


def flashinfer_inputs(batch, dtype, rank, seed):
    """FlashInfer's partial_o [B, heads, cp, D] and partial_lse [B, heads, cp] fp32."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    po = torch.randn(batch, HL, WORLD, D, generator=g)
    lse = torch.empty(batch, WORLD, HL)
    fill(lse, g, rank)
    lse = lse.transpose(1, 2).contiguous()
    po[~torch.isfinite(lse)] = math.nan  # an empty source's payload: never read
    return po.to(dtype), lse


def flashinfer_oracle(po, pl, rank, base):
    """Rank `rank` merges every rank's partial_o[..., rank, :] (any leading
    dims: each entry on its own). Returns (out [..., D], lse [...])."""
    lead, d = tuple(po.shape[:-2]), po.shape[-1]
    parts = [p.reshape(-1, WORLD, d)[:, rank].unsqueeze(1) for p in gathered(po)]
    lses = [l.reshape(-1, WORLD)[:, rank].unsqueeze(1) for l in gathered(pl)]
    out, lse = oracle64.merge(parts, lses, base)
    return out.reshape(lead + (d,)), lse.reshape(lead)


def seq_lens_of(rank):
    """vLLM's empty-shard metadata for a batch of 9 rows: 3 sequences of rows
    [0, 3), [3, 5), [5, 7), rows 7 and 8 padding; rank 0 holds no KV of
    sequence 1, rank 1 none of sequence 2. Returns (seq_lens,
    query_start_loc, bool [9]: the rows empty on that rank)."""
    seq_lens = torch.tensor([[4, 0, 2], [3, 5, 0]][rank], dtype=torch.int32)
    qsl = torch.tensor([0, 3, 5, 7], dtype=torch.int32)
    empty = torch.tensor([False] * 3 + [rank == 0] * 2 + [rank == 1] * 2 + [True] * 2)
    return seq_lens, qsl, empty


def vllm_masked_inputs(dtype, lse_dtype, rank, seed):
    """vllm_inputs of 9 rows with this rank's empty rows (seq_lens_of) holding
    NaN partials and finite LSEs (the metadata alone makes them empty), and
    the float64 oracle of this rank's heads."""
    po, pl = vllm_inputs(9, dtype, lse_dtype, rank, seed)
    seq_lens, qsl, empty = seq_lens_of(rank)
    po[empty] = math.nan
    pl[empty] = 1.5
    heads = slice(rank * HL, (rank + 1) * HL)
    parts, lses = [], []
    for s, (p, l) in enumerate(zip(gathered(po), gathered(pl))):
        l = l.float()[:, heads].clone()
        l[seq_lens_of(s)[2]] = -math.inf
        parts.append(p[:, heads])
        lses.append(l)
    want, want_lse = oracle64.merge(parts, lses, "e" if lse_dtype == torch.float32 else 2)
    return po, pl, seq_lens, qsl, want, want_lse


def raises(name, what, call, kind, *fragments):
    """call() raises kind with every fragment in its message."""
    try:
        call()
    except kind as e:
        for fragment in fragments:
            check(name, fragment in str(e), f"{what}: {fragment!r} not in {e}")
        return str(e)
    except Exception as e:  # another type: the check's failure, not the case's crash
        raise AssertionError(f"{name}: {what}: {type(e).__name__} ({e}), expected {kind.__name__}") from e
    raise AssertionError(f"{name}: {what}: accepted, expected {kind.__name__}")


class StandIn:
    """nccl_dcp.Context's call surface, merging what it is handed as the
    library reads it: partial_out [B, cp*Hl, D] or [B, cp, Hl, D] (any
    strides), partial_lse [B, cp*Hl] or [B, cp, Hl]. Records its
    configuration and the tensors it was called with."""

    made = []
    on_cuda = False  # True: calls are checked as Context checks them, on cuda:0 (they then refuse CPU tensors)

    def __init__(self, group, head_dim, local_heads, dtype, lse_base, max_batch=None, lse_dtype="float32"):
        from nccl_dcp.context import lse_dtype_name
        lse_dtype_name(lse_dtype)  # Context's own refusal (ValueError naming lse_dtype)
        self.group, self.config = group, dict(head_dim=head_dim, local_heads=local_heads, dtype=dtype,
                                              lse_base=lse_base, max_batch=max_batch, lse_dtype=lse_dtype)
        self.calls, self.extras, self.closed = [], [], False
        StandIn.made.append(self)

    def __call__(self, partial_out, partial_lse, return_lse=False, seq_lens=None, query_start_loc=None):
        from nccl_dcp import reference
        from nccl_dcp._validate import CallSpec, check_call, dtype_name
        self.calls.append((partial_out, partial_lse))
        self.extras.append((seq_lens, query_start_loc))
        if StandIn.on_cuda:
            spec = CallSpec(cp=WORLD, local_heads=self.config["local_heads"], head_dim=self.config["head_dim"],
                            dtype=dtype_name(self.config["dtype"]), device=0,
                            lse_dtype=dtype_name(self.config["lse_dtype"]))
            check_call(spec, partial_out, partial_lse, partial_out.new_empty(partial_out.shape[0], spec.local_heads,
                                                                             spec.head_dim), None)
        out, lse = reference.a2a_lse_reduce(partial_out, partial_lse, self.config["local_heads"],
                                            self.config["lse_base"], self.group, seq_lens=seq_lens,
                                            query_start_loc=query_start_loc)
        return (out, lse) if return_lse else out

    def close(self):
        self.closed = True


def check(name, ok, detail):
    if not ok:
        raise AssertionError(f"{name}: {detail}")


def run_case(name, rank):
    import torch.distributed as dist

    from nccl_dcp import flashinfer, vllm
    world = dist.group.WORLD
    parts = name.split("/")
    if name.startswith("vllm/cpu/") and "seq_lens" in name:
        dtype, lse_dtype = getattr(torch, parts[2]), torch.bfloat16 if "lse_bf16" in name else torch.float32
        po, pl, seq_lens, qsl, want, want_lse = vllm_masked_inputs(dtype, lse_dtype, rank, seed=50)
        out, lse = vllm.dcp_a2a_lse_reduce(po, pl, world, None, True, lse_dtype == torch.float32, seq_lens=seq_lens,
                                           query_start_loc=qsl)
        check(name, lse.dtype == torch.float32, f"lse {lse.dtype}")
        bad = mismatches(out, want, lse, want_lse)
        check(name, bad == 0, f"{bad} elements off the float64 oracle")
        out = vllm.dcp_a2a_lse_reduce(po, pl, world, is_lse_base_on_e=lse_dtype == torch.float32, seq_lens=seq_lens,
                                      query_start_loc=qsl)
        check(name, mismatches(out, want) == 0, "without return_lse: off the oracle")
    elif name == "vllm/library_path/seq_lens_and_fp32_lse":
        StandIn.made.clear()
        po, pl, seq_lens, qsl, want, want_lse = vllm_masked_inputs(torch.bfloat16, torch.bfloat16, rank, seed=51)
        out, lse = vllm.dcp_a2a_lse_reduce(po, pl, world, return_lse=True, is_lse_base_on_e=False,
                                           seq_lens=seq_lens, query_start_loc=qsl)
        check(name, lse.dtype == torch.float32, f"merged LSE {lse.dtype}: vLLM returns float32")
        check(name, mismatches(out, want, lse, want_lse) == 0, "wrong merge through the context")
        c = StandIn.made[-1]
        check(name, c.extras[-1][0] is seq_lens and c.extras[-1][1] is qsl, "seq_lens / query_start_loc not handed on")
        check(name, c.config["lse_dtype"] == torch.bfloat16, f"config {c.config}")
        # int64 metadata, which vLLM's kernel takes too: handed on as int32.
        out, lse = vllm.dcp_a2a_lse_reduce(po, pl, world, return_lse=True, is_lse_base_on_e=False,
                                           seq_lens=seq_lens.long(), query_start_loc=qsl.long())
        check(name, mismatches(out, want, lse, want_lse) == 0, "int64 seq_lens: wrong merge")
        s64, q64 = c.extras[-1]
        check(name, s64.dtype == q64.dtype == torch.int32 and torch.equal(s64, seq_lens) and torch.equal(q64, qsl),
              f"int64 seq_lens handed on as {s64.dtype} / {q64.dtype}")
        vllm.close_contexts()
    elif name == "vllm/library_path/errors_name_the_callers_arguments":
        StandIn.made.clear()
        po, pl = vllm_inputs(4, torch.bfloat16, torch.float32, rank, seed=52)
        text = raises(name, "float64 LSEs", lambda: vllm.dcp_a2a_lse_reduce(po, pl.double(), world), ValueError,
                      "cp_attn_lse's dtype must be")
        check(name, "lse_dtype" not in text, f"Context's name in {text!r}")
        StandIn.on_cuda = True
        try:
            text = raises(name, "CPU tensors on a CUDA context", lambda: vllm.dcp_a2a_lse_reduce(po, pl, world),
                          ValueError, "cp_attn_out is on cpu")
        finally:
            StandIn.on_cuda = False
        check(name, "partial_out" not in text, f"Context's name in {text!r}")
        vllm.close_contexts()
    elif name == "vllm/refuses_bad_arguments":
        po, pl = vllm_inputs(9, torch.float32, torch.float32, rank, seed=53)
        seq_lens, qsl, _ = seq_lens_of(rank)
        raises(name, "seq_lens alone", lambda: vllm.dcp_a2a_lse_reduce(po, pl, world, seq_lens=seq_lens), ValueError,
               "seq_lens is given without query_start_loc")
        raises(name, "query_start_loc alone", lambda: vllm.dcp_a2a_lse_reduce(po, pl, world, query_start_loc=qsl),
               ValueError, "query_start_loc is given without seq_lens")
        raises(name, "query_start_loc of another length",
               lambda: vllm.dcp_a2a_lse_reduce(po, pl, world, seq_lens=seq_lens, query_start_loc=qsl[:3]), ValueError,
               "query_start_loc [numSeqs + 1]", "[3] and [3]")
        raises(name, "a string base", lambda: vllm.dcp_a2a_lse_reduce(po, pl, world, is_lse_base_on_e="base2"),
               TypeError, "is_lse_base_on_e must be a bool", "'base2'")
    elif name.startswith("vllm/cpu/"):
        dtype, base = getattr(torch, parts[2]), 2 if parts[3] == "base_2" else "e"
        lse_dtype = torch.bfloat16 if parts[4] == "lse_bf16" else torch.float32
        for batch in (1, 9):
            po, pl = vllm_inputs(batch, dtype, lse_dtype, rank, seed=batch)
            want, want_lse = vllm_oracle(po, pl, rank, base)
            if parts[4] == "no_lse":
                out = vllm.dcp_a2a_lse_reduce(po, pl, world, is_lse_base_on_e=base == "e")
                check(name, out.shape == (batch, HL, D) and out.dtype == dtype, f"out {out.shape} {out.dtype}")
                bad = mismatches(out, want)
            else:
                out, lse = vllm.dcp_a2a_lse_reduce(po, pl, world, return_lse=True, is_lse_base_on_e=base == "e")
                # float32 whatever the input LSEs' dtype, as vLLM returns it
                check(name, lse.shape == (batch, HL) and lse.dtype == torch.float32, f"lse {lse.shape} {lse.dtype}")
                bad = mismatches(out, want, lse, want_lse)
            check(name, bad == 0, f"B {batch}: {bad} elements off the float64 oracle")
    elif name == "vllm/library_path/layout_config_cache":
        StandIn.made.clear()
        po, pl = vllm_inputs(9, torch.bfloat16, torch.float32, rank, seed=5)
        want, want_lse = vllm_oracle(po, pl, rank, "e")
        for _ in range(2):
            out, lse = vllm.dcp_a2a_lse_reduce(po, pl, world, return_lse=True)
            check(name, mismatches(out, want, lse, want_lse) == 0, "wrong merge through the context")
        check(name, len(StandIn.made) == 1, f"{len(StandIn.made)} contexts for one configuration")
        c = StandIn.made[0]
        check(name, c.config == dict(head_dim=D, local_heads=HL, dtype=torch.bfloat16, lse_base="e", max_batch=None,
                                     lse_dtype=torch.float32), f"config {c.config}")
        check(name, c.calls[0][0].data_ptr() == po.data_ptr(), "partial_out was copied")
        vllm.dcp_a2a_lse_reduce(po.float(), pl, world, is_lse_base_on_e=False)  # another dtype and base: another
        check(name, len(StandIn.made) == 2 and StandIn.made[1].config["lse_base"] == 2, "no second context")
        vllm.close_contexts()
        check(name, all(c.closed for c in StandIn.made), "close_contexts left one open")
    elif name == "vllm/library_path/views_the_library_cannot_take_are_copied":
        # vLLM takes any strides; the library wants 16-byte strides and pointer.
        StandIn.made.clear()
        po, pl = vllm_inputs(5, torch.bfloat16, torch.float32, rank, seed=54)
        want, want_lse = vllm_oracle(po, pl, rank, "e")
        b, h, d = po.shape
        padded = torch.full((b, h, d + 1), math.nan, dtype=po.dtype)[..., :d]  # head stride d + 1: 34 bytes
        padded.copy_(po)
        shifted = torch.full((b * h * d + 1,), math.nan, dtype=po.dtype)[1:].view(b, h, d)  # packed, 2 bytes off
        shifted.copy_(po)
        for what, view in (("a padded head stride", padded), ("a pointer 2 bytes off", shifted)):
            out, lse = vllm.dcp_a2a_lse_reduce(view, pl, world, return_lse=True)
            seen = StandIn.made[-1].calls[-1][0]
            check(name, seen.data_ptr() % 16 == 0 and all(st * 2 % 16 == 0 for st in seen.stride()[:-1]),
                  f"{what}: handed on as {seen.stride()} at {seen.data_ptr() % 16} bytes off")
            check(name, mismatches(out, want, lse, want_lse) == 0, f"{what}: off the float64 oracle")
        vllm.dcp_a2a_lse_reduce(po, pl, world)
        check(name, StandIn.made[-1].calls[-1][0].data_ptr() == po.data_ptr(), "a packed, aligned input was copied")
        vllm.close_contexts()
    elif name == "vllm/one_rank_passes_through":
        groups = [dist.new_group([r]) for r in range(WORLD)]
        po, pl = vllm_inputs(4, torch.bfloat16, torch.float32, rank, seed=6)
        out, lse = vllm.dcp_a2a_lse_reduce(po, pl, groups[rank], return_lse=True)
        check(name, out is po and lse is pl, "a one-rank group must return its inputs, as vLLM does")
    elif name == "vllm/refuses_bad_shapes":
        for po, pl in ((torch.zeros(2, 5, D), torch.zeros(2, 5)), (torch.zeros(2, 6, D), torch.zeros(2, 4))):
            try:
                vllm.dcp_a2a_lse_reduce(po, pl, world)
            except ValueError:
                continue
            raise AssertionError(f"{name}: {tuple(po.shape)} / {tuple(pl.shape)} accepted")
    elif name.startswith("flashinfer/cpu/") and parts[3] in ("base_2", "base_e"):
        dtype, base = getattr(torch, parts[2]), 2 if parts[3] == "base_2" else "e"
        ws = flashinfer.decode_cp_a2a_lse_reduce_create_workspace(64, HL, WORLD, D, dtype, world)
        for batch in (1, 9):
            po, pl = flashinfer_inputs(batch, dtype, rank, seed=20 + batch)
            want, _ = flashinfer_oracle(po, pl, rank, base)
            out = flashinfer.decode_cp_a2a_lse_reduce(po, pl, ws, rank, WORLD, is_lse_base_on_e=base == "e")
            check(name, out.shape == (batch, HL, D) and out.dtype == dtype, f"out {out.shape} {out.dtype}")
            bad = mismatches(out, want)
            check(name, bad == 0, f"B {batch}: {bad} elements off the float64 oracle")
        ws.close()
    elif name == "flashinfer/library_path/strided_view_and_cache":
        StandIn.made.clear()
        ws = flashinfer.decode_cp_a2a_lse_reduce_create_workspace(32, HL, WORLD, D, torch.bfloat16, world)
        po, pl = flashinfer_inputs(9, torch.bfloat16, rank, seed=31)
        want, _ = flashinfer_oracle(po, pl, rank, 2)
        for _ in range(2):
            out = flashinfer.decode_cp_a2a_lse_reduce(po, pl, ws, rank, WORLD)
            check(name, mismatches(out, want) == 0, "wrong merge through the context")
        check(name, len(StandIn.made) == 1, f"{len(StandIn.made)} contexts for one LSE base")
        c = StandIn.made[0]
        check(name, c.config["lse_base"] == 2 and c.config["max_batch"] == 32 and c.config["local_heads"] == HL,
              f"config {c.config}")
        seen_po, seen_pl = c.calls[0]
        check(name, tuple(seen_po.shape) == (9, WORLD, HL, D) and seen_po.data_ptr() == po.data_ptr()
              and seen_po.stride() == (HL * WORLD * D, D, WORLD * D, 1), f"partial_o as {seen_po.stride()}")
        check(name, tuple(seen_pl.shape) == (9, WORLD, HL) and seen_pl.data_ptr() == pl.data_ptr(),
              f"partial_lse as {tuple(seen_pl.shape)}")
        flashinfer.decode_cp_a2a_lse_reduce(po, pl, ws, rank, WORLD, is_lse_base_on_e=True)
        check(name, len(StandIn.made) == 2 and StandIn.made[1].config["lse_base"] == "e", "no base-e context")
        ws.close()
        check(name, all(c.closed for c in StandIn.made), "close() left one open")
    elif name == "flashinfer/cpu/bfloat16/lse_mode_positional":
        ws = flashinfer.decode_cp_a2a_lse_reduce_create_workspace(64, HL, WORLD, D, torch.bfloat16, world)
        po, pl = flashinfer_inputs(9, torch.bfloat16, rank, seed=60)
        for mode, base in (("base2", 2), ("basee", "e")):
            want, _ = flashinfer_oracle(po, pl, rank, base)
            out = flashinfer.decode_cp_a2a_lse_reduce(po, pl, ws, rank, WORLD, mode)  # 0.7.1's 6th argument
            check(name, mismatches(out, want) == 0, f"lse_mode {mode!r}: off the base-{base} oracle")
            out = flashinfer.decode_cp_a2a_lse_reduce(po, pl, ws, rank, WORLD, lse_mode=mode,
                                                      is_lse_base_on_e=base == "e", enable_pdl=True)  # agreeing
            check(name, mismatches(out, want) == 0, f"lse_mode {mode!r} with is_lse_base_on_e: off the oracle")
        want, _ = flashinfer_oracle(po, pl, rank, 2)
        out = flashinfer.decode_cp_a2a_lse_reduce(po, pl, ws, rank, WORLD)
        check(name, mismatches(out, want) == 0, "the default: off the base-2 oracle")
        ws.close()
    elif name == "flashinfer/refuses_bad_lse_modes":
        ws = flashinfer.decode_cp_a2a_lse_reduce_create_workspace(8, HL, WORLD, D, torch.bfloat16, world)
        po, pl = flashinfer_inputs(2, torch.bfloat16, rank, seed=61)
        call = flashinfer.decode_cp_a2a_lse_reduce
        raises(name, "lse_mode 'base10'", lambda: call(po, pl, ws, rank, WORLD, "base10"), ValueError,
               "lse_mode must be 'base2' or 'basee', got 'base10'")
        raises(name, "a positional bool (the pre-merge is_lse_base_on_e)", lambda: call(po, pl, ws, rank, WORLD, True),
               ValueError, "lse_mode must be 'base2' or 'basee', got True", "is_lse_base_on_e")
        raises(name, "is_lse_base_on_e='yes'", lambda: call(po, pl, ws, rank, WORLD, is_lse_base_on_e="yes"),
               TypeError, "is_lse_base_on_e must be a bool")
        raises(name, "disagreeing bases", lambda: call(po, pl, ws, rank, WORLD, "base2", is_lse_base_on_e=True),
               ValueError, "lse_mode 'base2' and is_lse_base_on_e=True disagree")
        ws.close()
    elif name == "flashinfer/cpu/float16/leading_dims":
        ws = flashinfer.decode_cp_a2a_lse_reduce_create_workspace(8, HL, WORLD, D, torch.float16, world)
        po, pl = flashinfer_inputs(4, torch.float16, rank, seed=62)  # [4, HL, cp, D]
        shapes = {
            "[T, cp, D], T a multiple of heads": (po.reshape(4 * HL, WORLD, D), pl.reshape(4 * HL, WORLD)),
            "[T, cp, D], T not a multiple of heads": (po.reshape(4 * HL, WORLD, D)[:5], pl.reshape(4 * HL, WORLD)[:5]),
            "[2, 2, heads, cp, D]": (po.reshape(2, 2, HL, WORLD, D), pl.reshape(2, 2, HL, WORLD)),
            "[heads, B, cp, D] (a transpose: copied)": (po.transpose(0, 1), pl.transpose(0, 1)),
        }
        for what, (p, l) in shapes.items():
            want, _ = flashinfer_oracle(p, l, rank, "e")
            out = flashinfer.decode_cp_a2a_lse_reduce(p, l, ws, rank, WORLD, "basee")
            check(name, tuple(out.shape) == tuple(p.shape[:-2]) + (D,), f"{what}: out {tuple(out.shape)}")
            check(name, mismatches(out, want) == 0, f"{what}: off the float64 oracle")
        ws.close()
    elif name == "flashinfer/library_path/leading_dims":
        StandIn.made.clear()
        ws = flashinfer.decode_cp_a2a_lse_reduce_create_workspace(8, HL, WORLD, D, torch.bfloat16, world)
        po, pl = flashinfer_inputs(4, torch.bfloat16, rank, seed=63)
        p3, l3 = po.reshape(4 * HL, WORLD, D), pl.reshape(4 * HL, WORLD)
        want, _ = flashinfer_oracle(p3, l3, rank, 2)
        out = flashinfer.decode_cp_a2a_lse_reduce(p3, l3, ws, rank, WORLD)
        check(name, tuple(out.shape) == (4 * HL, D) and mismatches(out, want) == 0, f"[T, cp, D]: out {out.shape}")
        check(name, len(StandIn.made) == 1 and StandIn.made[0].config["local_heads"] == HL,
              "T a multiple of heads: not the workspace's context")
        seen_po, seen_pl = StandIn.made[0].calls[-1]
        check(name, tuple(seen_po.shape) == (4, WORLD, HL, D) and seen_po.data_ptr() == p3.data_ptr()
              and seen_pl.data_ptr() == l3.data_ptr(), f"[T, cp, D] copied or misread: {tuple(seen_po.shape)}")
        want, _ = flashinfer_oracle(p3[:5], l3[:5], rank, 2)
        out = flashinfer.decode_cp_a2a_lse_reduce(p3[:5], l3[:5], ws, rank, WORLD)
        check(name, tuple(out.shape) == (5, D) and mismatches(out, want) == 0, "T = 5: off the oracle")
        check(name, len(StandIn.made) == 2 and StandIn.made[1].config["local_heads"] == 1
              and StandIn.made[1].config["max_batch"] == 8 * HL, f"T = 5: {[c.config for c in StandIn.made]}")
        ws.close()
        check(name, all(c.closed for c in StandIn.made), "close() left one open")
    elif name == "flashinfer/library_path/errors_name_the_callers_arguments":
        StandIn.made.clear()
        ws = flashinfer.decode_cp_a2a_lse_reduce_create_workspace(8, HL, WORLD, D, torch.bfloat16, world)
        po, pl = flashinfer_inputs(2, torch.bfloat16, rank, seed=64)
        StandIn.on_cuda = True
        try:
            text = raises(name, "CPU tensors on a CUDA context",
                          lambda: flashinfer.decode_cp_a2a_lse_reduce(po, pl, ws, rank, WORLD), ValueError,
                          "partial_o is on cpu", "as the library takes them")
        finally:
            StandIn.on_cuda = False
        check(name, "partial_out" not in text, f"Context's name in {text!r}")
        ws.close()
    elif name == "flashinfer/library_path/workspace_makes_its_context":
        # FlashInfer's creation does the collective work, so an engine may
        # capture the first call: the workspace's context is made with it.
        StandIn.made.clear()
        create = flashinfer.decode_cp_a2a_lse_reduce_create_workspace
        ws = create(16, HL, WORLD, D, torch.bfloat16, world)
        check(name, len(StandIn.made) == 1, f"{len(StandIn.made)} contexts made by the creation, not 1")
        check(name, StandIn.made[0].config == dict(head_dim=D, local_heads=HL, dtype=torch.bfloat16, lse_base=2,
                                                   max_batch=16, lse_dtype="float32"),
              f"config {StandIn.made[0].config}")
        po, pl = flashinfer_inputs(3, torch.bfloat16, rank, seed=65)
        want, _ = flashinfer_oracle(po, pl, rank, 2)
        out = flashinfer.decode_cp_a2a_lse_reduce(po, pl, ws, rank, WORLD)
        check(name, mismatches(out, want) == 0 and len(StandIn.made) == 1 and len(StandIn.made[0].calls) == 1,
              "the first call did not run on the creation's context")
        ws_e = create(16, HL, WORLD, D, torch.bfloat16, world, lse_mode="basee")
        check(name, len(StandIn.made) == 2 and StandIn.made[1].config["lse_base"] == "e", "lse_mode='basee': no base-e")
        ws_none = create(16, HL, WORLD, D, torch.bfloat16, world, lse_mode=None)
        check(name, len(StandIn.made) == 2, "lse_mode=None made a context")
        raises(name, "lse_mode 'base10'", lambda: create(16, HL, WORLD, D, torch.bfloat16, world, lse_mode="base10"),
               ValueError, "lse_mode must be 'base2' or 'basee'")
        check(name, len(StandIn.made) == 2, "a refused lse_mode made a context")
        for w in (ws, ws_e, ws_none):
            w.close()
        check(name, all(c.closed for c in StandIn.made), "close() left one open")
    elif name == "flashinfer/refuses_bad_arguments":
        ws = flashinfer.decode_cp_a2a_lse_reduce_create_workspace(8, HL, WORLD, D, torch.bfloat16, world)
        po, pl = flashinfer_inputs(2, torch.bfloat16, rank, seed=40)
        bad_calls = [
            lambda: flashinfer.decode_cp_a2a_lse_reduce(po, pl, ws, 1 - rank, WORLD),  # another rank
            lambda: flashinfer.decode_cp_a2a_lse_reduce(po.float(), pl, ws, rank, WORLD),  # dtype
            lambda: flashinfer.decode_cp_a2a_lse_reduce(po, pl.bfloat16(), ws, rank, WORLD),  # LSEs not fp32
            lambda: flashinfer.decode_cp_a2a_lse_reduce(po[:, :, :1], pl[:, :, :1], ws, rank, WORLD),  # cp
            lambda: flashinfer.decode_cp_a2a_lse_reduce(po, pl, object(), rank, WORLD),  # not a workspace
            lambda: flashinfer.decode_cp_a2a_lse_reduce_create_workspace(8, HL, 3, D, torch.bfloat16, world),
            lambda: flashinfer.decode_cp_a2a_lse_reduce_workspace_size(8, HL, WORLD, D, torch.float32),
        ]
        for i, call in enumerate(bad_calls):
            try:
                call()
            except (ValueError, TypeError):
                continue
            raise AssertionError(f"{name}: bad call {i} accepted")
    else:
        raise AssertionError(f"no such case {name}")


def worker(rank, port, results):
    import torch.distributed as dist

    from nccl_dcp import _dropin
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    real_context, real_uses, real_device = _dropin.Context, _dropin.uses_library, _dropin.library_device
    try:
        for name in CASES:
            library_path = "/library_path/" in name
            _dropin.Context = StandIn if library_path else real_context
            _dropin.uses_library = (lambda t, g: True) if library_path else real_uses
            # The stand-in's device: these cases' CPU tensors, so a workspace's context serves their calls.
            _dropin.library_device = (lambda g: torch.device("cpu")) if library_path else real_device
            try:
                run_case(name, rank)
                results.put((rank, name, None))
            except Exception as e:  # this rank's verdict; the other rank runs on
                results.put((rank, name, f"{type(e).__name__}: {e}"))
            dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def verdicts():
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(worker, args=(port, results), nprocs=WORLD, start_method="spawn")
    found = {}
    while not results.empty():
        rank, name, error = results.get()
        found.setdefault(name, []).append((rank, error))
    return found


@pytest.mark.parametrize("name", CASES)
def test_dropin(verdicts, name):
    ranks = verdicts.get(name, [])
    assert len(ranks) == WORLD, f"{name} ran on {len(ranks)} of {WORLD} ranks"
    errors = [f"rank {r}: {e}" for r, e in ranks if e]
    assert not errors, "\n".join(errors)


# ---- the context cache on its own (this process, no group: a stand-in context)

class Counted:
    """A context stand-in: counts its creations; close() raises `fails`."""

    made = []
    creating = None  # called with each new one, inside its creation

    def __init__(self, group, fails=None, **config):
        self.group, self.config, self.fails, self.closed = group, config, fails, False
        Counted.made.append(self)
        if Counted.creating is not None:
            Counted.creating(self)

    def close(self):
        self.closed = True
        if self.fails is not None:
            raise self.fails


def test_context_cache_makes_one_context_per_key_across_threads(monkeypatch):
    """Two threads asking for one key at once: one creation (a collective:
    a second one would pair with a peer's next creation or hang, and stay
    unclosed), both get it."""
    import threading

    from nccl_dcp import _dropin
    monkeypatch.setattr(_dropin, "Context", Counted)
    Counted.made = []
    first_inside, second_calling, second_made = threading.Event(), threading.Event(), threading.Event()

    def creating(ctx):
        if len(Counted.made) == 1:  # the first creation: stay in it until the second thread has asked
            first_inside.set()
            second_calling.wait(10)
            second_made.wait(0.5)  # without the per-key lock the second thread makes its own meanwhile
        else:
            second_made.set()

    monkeypatch.setattr(Counted, "creating", staticmethod(creating))
    cache, group, got = _dropin.ContextCache(), object(), {}

    def get(who):
        if who == "second":
            second_calling.set()
        got[who] = cache.get(group, torch.device("cpu"), head_dim=D, local_heads=HL)

    first = threading.Thread(target=get, args=("first",))
    first.start()
    assert first_inside.wait(10)
    second = threading.Thread(target=get, args=("second",))
    second.start()
    first.join(10)
    second.join(10)
    assert len(Counted.made) == 1, f"{len(Counted.made)} contexts made for one key"
    assert got["first"] is got["second"] is Counted.made[0]
    assert len(cache) == 1
    assert cache.get(group, torch.device("cpu"), head_dim=D, local_heads=HL) is Counted.made[0]
    assert cache.get(group, torch.device("cpu"), head_dim=D, local_heads=HL + 1) is not Counted.made[0]


def test_context_cache_close_closes_every_context_when_one_raises(monkeypatch):
    """close() closes every context and empties the cache, then raises the
    first error with the others noted."""
    from nccl_dcp import _dropin
    monkeypatch.setattr(_dropin, "Context", Counted)
    monkeypatch.setattr(Counted, "creating", None)
    Counted.made = []
    cache, group, cpu = _dropin.ContextCache(), object(), torch.device("cpu")
    failing = cache.get(group, cpu, fails=RuntimeError("peer gone"))
    fine = cache.get(group, cpu, fails=None)
    also_failing = cache.get(group, cpu, fails=ValueError("second failure"))
    with pytest.raises(RuntimeError, match="peer gone") as info:
        cache.close()
    assert failing.closed and fine.closed and also_failing.closed
    assert len(cache) == 0
    text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert "1 more close() failed after it: ValueError: second failure" in text
    cache.close()  # nothing left: no error
