"""The engine drop-ins (nccl_dcp.vllm, nccl_dcp.flashinfer) on CPU: two
processes over gloo. Each case's result is compared with a float64 oracle
written from the header's formula over every rank's inputs, gathered:

  - the CPU path (CPU tensors run nccl_dcp.reference), every dtype, both
    LSE bases, with and without the merged LSE, the -inf / NaN / +inf
    corner cases;
  - the library path's plumbing, with a stand-in for nccl_dcp.Context that
    merges what it is handed as Context reads it: the layout the drop-in
    passes (FlashInfer's [B, heads, cp, D] as a strided view, never a copy),
    the configuration, the cache (one context per group and configuration);
  - vLLM's single-rank pass-through and both drop-ins' argument checks.

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
    "flashinfer/cpu/bfloat16/base_2", "flashinfer/cpu/float16/base_e", "flashinfer/cpu/bfloat16/base_e",
    "flashinfer/library_path/strided_view_and_cache", "flashinfer/refuses_bad_arguments",
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
    """Rank `rank` merges every rank's partial_o[:, :, rank]."""
    return oracle64.merge([p[:, :, rank] for p in gathered(po)], [l[:, :, rank] for l in gathered(pl)], base)


class StandIn:
    """nccl_dcp.Context's call surface, merging what it is handed as the
    library reads it: partial_out [B, cp*Hl, D] or [B, cp, Hl, D] (any
    strides), partial_lse [B, cp*Hl] or [B, cp, Hl]. Records its
    configuration and the tensors it was called with."""

    made = []

    def __init__(self, group, head_dim, local_heads, dtype, lse_base, max_batch=None, lse_dtype="float32"):
        self.group, self.config = group, dict(head_dim=head_dim, local_heads=local_heads, dtype=dtype,
                                              lse_base=lse_base, max_batch=max_batch, lse_dtype=lse_dtype)
        self.calls, self.closed = [], False
        StandIn.made.append(self)

    def __call__(self, partial_out, partial_lse, return_lse=False):
        from nccl_dcp import reference
        self.calls.append((partial_out, partial_lse))
        out, lse = reference.a2a_lse_reduce(partial_out, partial_lse, self.config["local_heads"],
                                            self.config["lse_base"], self.group)
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
    if name.startswith("vllm/cpu/"):
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
                check(name, lse.shape == (batch, HL) and lse.dtype == lse_dtype, f"lse {lse.shape} {lse.dtype}")
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
    elif name.startswith("flashinfer/cpu/"):
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
    real_context, real_uses = _dropin.Context, _dropin.uses_library
    try:
        for name in CASES:
            library_path = "/library_path/" in name
            _dropin.Context = StandIn if library_path else real_context
            _dropin.uses_library = (lambda t, g: True) if library_path else real_uses
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
