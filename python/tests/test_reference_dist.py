"""The PyTorch reference path that the GPU tests trust, checked on CPU: two
processes over gloo (loopback) run nccl_dcp.reference.a2a_lse_reduce on the
GPU tests' own inputs (gpu_torchrun.Inputs: every layout, the -inf / NaN /
+inf corner cases) and compare with a float64 oracle written from the
header's formula, element by element, over all ranks' gathered inputs."""

import math
import os
import socket

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import oracle64  # noqa: E402 (needs torch)

WORLD, HL, D = 2, 3, 16


def oracle(sources_po, sources_pl, rank, lse_base):
    """include/nccl_dcp.h's merge for `rank` (oracle64): sources_po[s]
    [B, cp, Hl, D], sources_pl[s] [B, cp, Hl]."""
    return oracle64.merge([po[:, rank] for po in sources_po], [pl[:, rank] for pl in sources_pl], lse_base)


def logical(inputs):
    """Contiguous [B, cp, Hl, D] and [B, cp, Hl] copies of an Inputs' views."""
    batch = inputs.po.shape[0]
    return (inputs.po.reshape(batch, WORLD, HL, D).float().contiguous(),
            inputs.pl.reshape(batch, WORLD, HL).contiguous())


def worker(rank, port, failures):
    import torch.distributed as dist
    from gpu_torchrun import Inputs
    from nccl_dcp import reference

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        for dtype in (torch.float32, torch.bfloat16):
            for base in (2, "e"):
                for layout in ("packed", "transposed", "padded"):
                    inputs = Inputs(layout, 9, WORLD, HL, D, dtype, seed=3, rank=rank, device="cpu")
                    out, lse = reference.a2a_lse_reduce(inputs.po, inputs.pl, HL, base)
                    po, pl = logical(inputs)
                    all_po = [torch.empty_like(po) for _ in range(WORLD)]
                    all_pl = [torch.empty_like(pl) for _ in range(WORLD)]
                    dist.all_gather(all_po, po)
                    dist.all_gather(all_pl, pl)
                    want, want_lse = oracle(all_po, all_pl, rank, 2 if base == 2 else "e")
                    bad = reference.count_mismatches(out, lse, want.float(), want_lse.float()).item()
                    corner_rows = int(torch.isinf(want_lse).sum())
                    if bad or corner_rows == 0 or out.dtype != dtype:
                        failures.put(f"rank {rank} {dtype} base {base} {layout}: {bad} wrong, "
                                     f"{corner_rows} empty merges, out {out.dtype}")
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_reference_matches_the_header_formula_over_two_ranks():
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    failures = ctx.SimpleQueue()
    mp.start_processes(worker, args=(free_port(), failures), nprocs=WORLD, start_method="spawn")
    found = []
    while not failures.empty():
        found.append(failures.get())
    assert not found, "\n".join(found)
