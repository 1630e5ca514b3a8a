"""A decode loop the way a serving engine runs it, with nccl_dcp's fused
all-to-all + LSE merge for decode context parallelism (DCP) of MLA
attention: several layers, two micro-batches on two streams (dual-batch
overlap), the whole step captured in one CUDA graph and replayed, and
NCCL_CUMEM_ENABLE=0 as vLLM sets it. Checked against, and timed next to,
the plain PyTorch path (dist.all_to_all_single of the partials and LSEs +
an fp32 merge). Copy what you need.

    NCCL_DCP_LIB=build/libnccl_dcp.so PYTHONPATH=python \\
        torchrun --nproc-per-node <GPUs> examples/torch_dcp_engine.py [--layers 4] [--batch 32]

Per layer and micro-batch, on every rank of the DCP group (cp ranks):
  q = h @ W_q (all H = cp * Hl heads); attention of q over this rank's KV
  shard -> partials [B, H, 512] + LSEs [B, H] (base e); the collective ->
  this rank's Hl heads merged [B, Hl, 512]; W_UV per head, this rank's rows
  of o_proj, all_reduce; h += that.
What an engine has to do for nccl_dcp, all of it below:
  - one Context per micro-batch stream (two contexts on one communicator may
    be in flight at once), created after init_process_group, closed before
    destroy_process_group;
  - preallocated out buffers (no allocation in the step), any stream, no
    bind_stream; warm up eagerly once before capturing (NCCL connects peers
    at its first collective);
  - ctx.check() now and then: a graph replay cannot raise, a poisoned
    context (a peer that stopped calling) writes NaN instead.
"""

import argparse
import os
import sys
from datetime import timedelta

# vLLM (vllm/env_override.py) sets this in every process unless the user did:
# NCCL then allocates without cuMem, so there is no NCCL symmetric window;
# nccl_dcp >= 0.2 runs its fused path over CUDA IPC instead. It must be set
# before the first NCCL communicator is created.
os.environ.setdefault("NCCL_CUMEM_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
import nccl_dcp  # noqa: E402
from nccl_dcp import reference  # noqa: E402

LATENT, ROPE, V_DIM = 512, 64, 128  # kv_lora_rank, qk_rope_head_dim, v_head_dim
DTYPE = torch.bfloat16


class Layer:
    """One MLA layer's weights and this rank's KV shard (same seed on every rank
    for the replicated weights, the rank's own for its shard)."""

    def __init__(self, index, cp, rank, hl, kv_len, hidden):
        g = torch.Generator(device="cuda").manual_seed(index)
        self.hl, self.heads = hl, cp * hl
        self.w_q = (torch.randn(hidden, cp * hl * (LATENT + ROPE), generator=g, device="cuda") / hidden**0.5).to(DTYPE)
        w_uv = torch.randn(cp * hl, LATENT, V_DIM, generator=g, device="cuda") / LATENT**0.5
        w_o = torch.randn(cp * hl * V_DIM, hidden, generator=g, device="cuda") / (cp * hl * V_DIM) ** 0.5
        self.w_uv = w_uv[rank * hl:(rank + 1) * hl].to(DTYPE)                          # this rank's heads
        self.w_o = w_o[rank * hl * V_DIM:(rank + 1) * hl * V_DIM].to(DTYPE)            # their rows of o_proj
        g_kv = torch.Generator(device="cuda").manual_seed(1000 * index + rank)
        self.kv = torch.randn(kv_len, LATENT + ROPE, generator=g_kv, device="cuda").to(DTYPE)
        self.scale = (LATENT + ROPE) ** -0.5


class MicroBatch:
    """A micro-batch's static buffers (captured by the graph) and its context."""

    def __init__(self, ctx, batch, cp, hl, hidden):
        self.ctx = ctx
        self.h_in = torch.zeros(batch, hidden, dtype=DTYPE, device="cuda")    # copied in before each replay
        self.h = torch.zeros_like(self.h_in)
        self.partial = torch.empty(batch, cp * hl, LATENT, dtype=DTYPE, device="cuda")
        self.lse = torch.empty(batch, cp * hl, device="cuda")
        self.out = torch.empty(batch, hl, LATENT, dtype=DTYPE, device="cuda")


def collective(mb, kind, group):
    """This rank's heads merged into mb.out: nccl_dcp or the PyTorch reference."""
    if kind == "nccl_dcp":
        mb.ctx(mb.partial, mb.lse, out=mb.out)
    else:
        parts, lses = reference.exchange(mb.partial, mb.lse, mb.out.shape[1], group)  # 2 x all_to_all_single
        mb.out.copy_(reference.merge(parts, lses, "e")[0])                           # fp32 merge


def layer_step(layer, mb, kind, group, collective_only=False):
    if not collective_only:
        q = (mb.h @ layer.w_q).view(mb.h.shape[0], layer.heads, LATENT + ROPE)
        scores = torch.einsum("bhd,sd->bhs", q, layer.kv).float() * layer.scale
        mb.lse.copy_(torch.logsumexp(scores, dim=-1))
        mb.partial.copy_(torch.einsum("bhs,sd->bhd", torch.softmax(scores, dim=-1).to(DTYPE), layer.kv[:, :LATENT]))
    collective(mb, kind, group)
    if not collective_only:
        v = torch.einsum("bhl,hlv->bhv", mb.out, layer.w_uv).reshape(mb.h.shape[0], -1)
        y = v @ layer.w_o
        dist.all_reduce(y, group=group)
        mb.h.add_(y)


def decode_step(layers, mbs, streams, kind, group, collective_only=False):
    """Every layer, the two micro-batches interleaved on their own streams."""
    current = torch.cuda.current_stream()
    for s in streams:
        s.wait_stream(current)
    for mb, s in zip(mbs, streams):
        with torch.cuda.stream(s):
            mb.h.copy_(mb.h_in)
    for layer in layers:
        for mb, s in zip(mbs, streams):
            with torch.cuda.stream(s):
                layer_step(layer, mb, kind, group, collective_only)
    for s in streams:
        current.wait_stream(s)


def capture(layers, mbs, streams, kind, group, collective_only=False):
    """Eager warm-up, then the step in one CUDA graph (torch.cuda.graph's own stream)."""
    for _ in range(2):
        decode_step(layers, mbs, streams, kind, group, collective_only)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        decode_step(layers, mbs, streams, kind, group, collective_only)
    return graph


def time_us(graph, replays, group):
    """Median microseconds per replay, the slowest rank's."""
    times = []
    for _ in range(replays):
        dist.barrier(group=group)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    t = torch.tensor([sorted(times)[len(times) // 2]], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32, help="tokens per micro-batch")
    parser.add_argument("--heads-per-rank", type=int, default=16)
    parser.add_argument("--kv-len", type=int, default=2048, help="KV-cache tokens per rank")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=3, help="decode steps checked against the reference")
    parser.add_argument("--replays", type=int, default=20, help="timed replays")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank), timeout=timedelta(seconds=120))
    group, cp, rank, hl = dist.group.WORLD, dist.get_world_size(), dist.get_rank(), args.heads_per_rank

    # One context per micro-batch stream, on the group's own NCCL communicator.
    # timeout_ms defaults to the group's timeout (120 s here).
    contexts = [nccl_dcp.Context(group, head_dim=LATENT, local_heads=hl, dtype=DTYPE, lse_base="e",
                                 max_batch=args.batch) for _ in range(2)]
    layers = [Layer(i, cp, rank, hl, args.kv_len, args.hidden) for i in range(args.layers)]
    mbs = [MicroBatch(ctx, args.batch, cp, hl, args.hidden) for ctx in contexts]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    topo = contexts[0].topology()
    if rank == 0:
        print(f"MLA decode, DCP over {cp} rank(s), {args.layers} layers, 2 micro-batches x {args.batch} tokens, "
              f"H = {cp * hl} heads ({hl} per rank), KV {args.kv_len} per rank; NCCL_CUMEM_ENABLE="
              f"{os.environ['NCCL_CUMEM_ENABLE']}; nccl_dcp {nccl_dcp.__version__}: {topo['path']} path, provider "
              f"{topo.get('provider')}, protocol {topo['protocol']}"
              f"{'; ' + topo['path_note'] if topo.get('path_note') else ''}", flush=True)

    graphs = {kind: capture(layers, mbs, streams, kind, group) for kind in ("nccl_dcp", "pytorch")}

    # Check: the same inputs through both graphs give the same merged outputs
    # (the last layer's, each micro-batch) and the same hidden states.
    g = torch.Generator(device="cuda").manual_seed(7)  # the same tokens on every rank
    worst = {"merged": 0.0, "hidden": 0.0}
    for _ in range(args.steps):
        for mb in mbs:
            mb.h_in.copy_(torch.randn(mb.h_in.shape, generator=g, device="cuda"))
        results = {}
        for kind, graph in graphs.items():
            for mb in mbs:
                mb.out.fill_(float("nan"))
            graph.replay()
            results[kind] = [(mb.out.float().clone(), mb.h.float().clone()) for mb in mbs]
        for ours, ref in zip(results["nccl_dcp"], results["pytorch"]):
            for name, a, b in (("merged", ours[0], ref[0]), ("hidden", ours[1], ref[1])):
                worst[name] = max(worst[name], ((a - b).abs().max() / b.abs().max()).item())
    for ctx in contexts:
        ctx.check()  # a replay cannot raise: ask the contexts
    # bf16 outputs: one rounding of ~0.4% apart at most; NaN fails the comparison.
    bad = torch.tensor([int(not (worst["merged"] <= 2e-2 and worst["hidden"] <= 2e-2))], device="cuda")
    dist.all_reduce(bad, op=dist.ReduceOp.MAX, group=group)
    if rank == 0:
        print(f"check vs PyTorch over {args.steps} steps: max error of the merged outputs {worst['merged']:.2e}, of "
              f"the hidden states after {args.layers} layers {worst['hidden']:.2e} (relative to the largest): "
              f"{'OK' if bad.item() == 0 else 'WRONG'}", flush=True)

    # Time: the whole step, and the collectives alone, per layer (both micro-batches).
    collective_graphs = {kind: capture(layers, mbs, streams, kind, group, collective_only=True)
                         for kind in ("nccl_dcp", "pytorch")}
    t = {kind: time_us(graph, args.replays, group) / args.layers for kind, graph in graphs.items()}
    c = {kind: time_us(graph, args.replays, group) / args.layers for kind, graph in collective_graphs.items()}
    if rank == 0:
        print(f"\nper layer (2 micro-batches), us, CUDA graph replays, slowest rank's median:\n"
              f"{'':>20} {'nccl_dcp':>10} {'pytorch':>10} {'speedup':>8}\n"
              f"{'layer':>20} {t['nccl_dcp']:>10.1f} {t['pytorch']:>10.1f} {t['pytorch'] / t['nccl_dcp']:>7.2f}x\n"
              f"{'collectives only':>20} {c['nccl_dcp']:>10.1f} {c['pytorch']:>10.1f} "
              f"{c['pytorch'] / c['nccl_dcp']:>7.2f}x", flush=True)

    del graphs, collective_graphs
    torch.cuda.synchronize()
    for ctx in contexts:
        ctx.close()  # collective, before the group goes
    dist.destroy_process_group()
    return 0 if bad.item() == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
