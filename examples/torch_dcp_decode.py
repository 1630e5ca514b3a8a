"""One decode step of an MLA attention layer under decode context
parallelism (DCP), in PyTorch, with nccl_dcp's fused collective on the
process group's own NCCL communicator; timed against the plain PyTorch path
(all_to_all_single of the partials and LSEs + the merge), under CUDA graphs.

    NCCL_DCP_LIB=build/libnccl_dcp.so PYTHONPATH=python \\
        torchrun --nproc-per-node <GPUs> examples/torch_dcp_decode.py [--batches 1,8,32,128]

The step, per rank of a DCP group of cp ranks (DeepSeek-V3-like shapes):
  1. attention (a stand-in for FlashMLA): the queries of all H = cp * Hl
     heads against this rank's shard of the latent KV cache -> partial
     outputs [B, H, 512] and their LSEs [B, H] (natural log);
  2. the collective: every rank gets, for its Hl heads, the LSE-weighted
     merge of the cp partials -> [B, Hl, 512];
  3. the output projection: the latent up-projection W_UV per head, then
     this rank's row slice of o_proj, all-reduced over the group.
At start-up the merged output is checked against attention over the whole
(all-gathered) KV cache: the collective must reproduce full attention.
"""

import argparse
import os
import statistics
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
import nccl_dcp  # noqa: E402
from nccl_dcp import reference  # noqa: E402

LATENT, ROPE, V_DIM = 512, 64, 128  # kv_lora_rank, qk_rope_head_dim, v_head_dim


class MlaDecodeLayer:
    """The weights and caches of one layer, on this rank."""

    def __init__(self, cp, rank, heads_per_rank, kv_len, hidden, dtype):
        g = torch.Generator(device="cuda").manual_seed(1234 + rank)
        self.cp, self.hl, self.dtype = cp, heads_per_rank, dtype
        self.kv_shard = torch.randn(kv_len, LATENT + ROPE, generator=g, device="cuda").to(dtype)  # this rank's tokens
        self.w_uv = (torch.randn(heads_per_rank, LATENT, V_DIM, generator=g, device="cuda") / LATENT**0.5).to(dtype)
        self.w_o = (torch.randn(heads_per_rank * V_DIM, hidden, generator=g, device="cuda")
                    / (cp * heads_per_rank * V_DIM) ** 0.5).to(dtype)
        self.scale = (LATENT + ROPE) ** -0.5

    def attention(self, q, kv=None):
        """Absorbed MLA attention of q [B, H, 576] over kv [S, 576] (default:
        this rank's shard): (out [B, H, 512], lse [B, H] fp32, base e)."""
        kv = self.kv_shard if kv is None else kv
        scores = torch.einsum("bhd,sd->bhs", q.float(), kv.float()) * self.scale
        lse = torch.logsumexp(scores, dim=-1)
        out = torch.einsum("bhs,sd->bhd", torch.softmax(scores, dim=-1), kv[:, :LATENT].float())
        return out.to(self.dtype), lse

    def project(self, merged, group):
        """W_UV per head, then o_proj rows of this rank's heads, all-reduced."""
        v = torch.einsum("bhl,hlv->bhv", merged, self.w_uv).reshape(merged.shape[0], -1)
        y = v @ self.w_o
        dist.all_reduce(y, group=group)
        return y


def check_against_full_attention(layer, ctx, q, group):
    """The merged output of this rank's heads equals attention over the whole KV cache."""
    rank, hl = dist.get_rank(group), layer.hl
    shards = [torch.empty_like(layer.kv_shard) for _ in range(layer.cp)]
    dist.all_gather(shards, layer.kv_shard, group=group)
    partial, lse = layer.attention(q)
    merged, merged_lse = ctx(partial, lse, return_lse=True)
    full, full_lse = layer.attention(q[:, rank * hl:(rank + 1) * hl], torch.cat(shards))
    torch.cuda.synchronize()
    # Relative to the largest output: bf16 partials carry ~0.4% rounding.
    out_err = ((merged.float() - full.float()).abs().max() / full.float().abs().max()).item()
    lse_err = (merged_lse - full_lse).abs().max().item()
    ok = torch.tensor([int(out_err > 2e-2 or lse_err > 1e-3)], device="cuda")
    dist.all_reduce(ok, op=dist.ReduceOp.MAX, group=group)
    if rank == 0:
        print(f"check vs full attention over {layer.cp} KV shards: max |out| error {out_err:.2e} (relative), "
              f"max |lse| error {lse_err:.2e}: {'OK' if ok.item() == 0 else 'WRONG'}", flush=True)
    return ok.item() == 0


def time_graph(fn, stream, iters, replays, group):
    """Median microseconds per fn() call: iters calls captured in one CUDA graph."""
    stream.wait_stream(torch.cuda.current_stream())  # fn's inputs were made on the current stream
    with torch.cuda.stream(stream):
        for _ in range(3):  # eager warm-up: NCCL connects its peers at the first all-to-all
            fn()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(iters):
            fn()
    times = []
    for _ in range(replays):
        dist.barrier(group=group)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / iters)
    # The ranks' medians, worst one: a collective is as slow as its slowest rank.
    t = torch.tensor([statistics.median(times)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,8,32,128", help="decode batch sizes (tokens)")
    parser.add_argument("--heads-per-rank", type=int, default=16, help="Hl (DeepSeek-V3: 128 heads / 8 ranks)")
    parser.add_argument("--kv-len", type=int, default=4096, help="KV-cache tokens per rank")
    parser.add_argument("--hidden", type=int, default=7168)
    parser.add_argument("--iters", type=int, default=20, help="calls per CUDA graph")
    parser.add_argument("--replays", type=int, default=20)
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank), timeout=timedelta(seconds=120))
    group = dist.group.WORLD
    cp, rank, hl = dist.get_world_size(), dist.get_rank(), args.heads_per_rank
    dtype = torch.bfloat16
    layer = MlaDecodeLayer(cp, rank, hl, args.kv_len, args.hidden, dtype)
    batches = [int(b) for b in args.batches.split(",")]
    stream = torch.cuda.Stream()

    # The collective on PyTorch's own communicator of the group: no second NCCL bootstrap.
    ctx = nccl_dcp.Context(group, head_dim=LATENT, local_heads=hl, dtype=dtype, lse_base="e",
                           max_batch=max(batches))
    topo = ctx.topology()
    if rank == 0:
        print(f"MLA decode, DCP over {cp} rank(s): H = {cp * hl} heads ({hl} per rank), latent {LATENT}, "
              f"KV {args.kv_len} tokens per rank, bf16; nccl_dcp {topo['path']} path, protocol {topo['protocol']}",
              flush=True)
    g = torch.Generator(device="cuda").manual_seed(99)  # the same queries on every rank
    ok = check_against_full_attention(
        layer, ctx, torch.randn(4, cp * hl, LATENT + ROPE, generator=g, device="cuda").to(dtype), group)
    torch.cuda.synchronize()  # everything below runs on `stream`: any stream works, the library orders the calls

    if rank == 0:
        print(f"\n{'batch':>6} {'nccl_dcp':>10} {'pytorch':>10} {'speedup':>8} {'step ours':>10} {'step ref':>10}"
              f"   (us per call, CUDA graphs of {args.iters} calls, slowest rank's median)", flush=True)
    for batch in batches:
        q = torch.randn(batch, cp * hl, LATENT + ROPE, generator=g, device="cuda").to(dtype)
        partial, lse = layer.attention(q)
        out = torch.empty(batch, hl, LATENT, dtype=dtype, device="cuda")

        def ours():
            ctx(partial, lse, out=out)

        def pytorch():
            out.copy_(reference.a2a_lse_reduce(partial, lse, hl, "e", group)[0])

        def step(collective):
            def run():
                p, l = layer.attention(q)
                partial.copy_(p)
                lse.copy_(l)
                collective()
                layer.project(out, group)
            return run

        t_ours = time_graph(ours, stream, args.iters, args.replays, group)
        t_ref = time_graph(pytorch, stream, args.iters, args.replays, group)
        t_step_ours = time_graph(step(ours), stream, max(1, args.iters // 4), args.replays, group)
        t_step_ref = time_graph(step(pytorch), stream, max(1, args.iters // 4), args.replays, group)
        if rank == 0:
            print(f"{batch:>6} {t_ours:>10.2f} {t_ref:>10.2f} {t_ref / t_ours:>7.2f}x {t_step_ours:>10.2f} "
                  f"{t_step_ref:>10.2f}", flush=True)

    torch.cuda.synchronize()
    ctx.close()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
