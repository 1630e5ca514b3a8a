"""Host time of one eager call of nccl_dcp's collective from Python, next to
a plain torch op on the same tensors (issue 24: an engine that runs
attention outside CUDA graphs pays this every layer of every step).

    NCCL_DCP_LIB=build/libnccl_dcp.so PYTHONPATH=python \\
        torchrun --standalone --nproc-per-node 1 python/bench_host_cost.py [--batch 32] [--calls 2000]

Per variant: the best (over --rounds) of the mean host time of --calls
back-to-back calls, measured with time.perf_counter around the loop (the
GPU is synchronized before and after, never inside). The GPU work of each
call is small, so the loop is bound by the host. Printed in microseconds:

  ctx(po, pl, out=out)             our op, preallocated out (what engines do)
  ctx(po, pl)                      our op, out allocated per call
  torch.ops.nccl_dcp.a2a_lse_reduce_out   the torch.library op (the dispatcher's cost)
  torch.add(po, po, out=po2)       a plain torch op over partial_out, preallocated
  torch.add(po, po)                the same, allocating

and the ratio ours / torch.add for each pair. The target is a ratio <= 1.5.
The eager path is the C helper nccl_dcp._fastcall when the package has it
(pip install ./python, or setup.py build_ext --inplace), else, with a C
compiler, one compiled for this run into a temporary directory, else
ctypes (PyLauncher). With the C helper, the two ctx(...) rows follow again
through ctypes, for comparison. Last, where ctx(po, pl, out=out) goes:
launch() (Context._fast: the tensors read, the layout found, the library
called) and the Python around it (Context.__call__), per path; and two
parts of that Python and of ctx(po, pl).
"""

import argparse
import os
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nccl_dcp  # noqa: E402


def host_us(fn, calls, rounds):
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return best


def c_helper():
    """How the C helper (nccl_dcp._fastcall) is in use: "installed", "built
    for this run" (a source-tree run with a C compiler: compiled into a
    temporary directory), or None (ctypes)."""
    from nccl_dcp import _devbuild, context
    if context._fastcall is not None:
        return "installed"
    if _devbuild.missing_toolchain():
        return None
    context._fastcall = _devbuild.build_fastcall(tempfile.mkdtemp(prefix="nccl_dcp_fastcall"))
    return "built for this run"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--heads-per-rank", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=512)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank), timeout=timedelta(seconds=120))
    cp, hl, d, b = dist.get_world_size(), args.heads_per_rank, args.head_dim, args.batch
    helper = c_helper()
    ctx = nccl_dcp.Context(dist.group.WORLD, head_dim=d, local_heads=hl, dtype=torch.bfloat16, lse_base=2,
                           max_batch=max(b, 1))
    po = torch.randn(b, cp * hl, d, device="cuda").to(torch.bfloat16)
    pl = torch.randn(b, cp * hl, device="cuda")
    out = torch.empty(b, hl, d, dtype=torch.bfloat16, device="cuda")
    po2 = torch.empty_like(po)
    op = torch.ops.nccl_dcp.a2a_lse_reduce_out
    op_id = ctx.op_id

    def us(fn):
        return host_us(fn, args.calls, args.rounds)

    rows = [
        ("ctx(po, pl, out=out)", us(lambda: ctx(po, pl, out=out))),
        ("ctx(po, pl)", us(lambda: ctx(po, pl))),
        ("torch.ops.nccl_dcp.a2a_lse_reduce_out", us(lambda: op(op_id, po, pl, out, None))),
        ("torch.add(po, po, out=po2)", us(lambda: torch.add(po, po, out=po2))),
        ("torch.add(po, po)", us(lambda: torch.add(po, po))),
    ]
    launch = ctx._fast  # Context.__call__ less its Python: the tensors read, the layout found, the library called
    paths = [(f"C helper, {helper}" if helper else "ctypes", rows[0][1], us(lambda: launch(po, pl, out, None, None)))]
    if helper:
        ctx._start_launcher(torch.device("cuda", local_rank), nccl_dcp._torch.current_raw_stream, native=False)
        ctx(po, pl, out=out)  # a new launcher: the layout's first call checks it
        launch = ctx._fast
        rows += [("ctx(po, pl, out=out)  [ctypes]", us(lambda: ctx(po, pl, out=out))),
                 ("ctx(po, pl)  [ctypes]", us(lambda: ctx(po, pl)))]
        paths.append(("ctypes", rows[-2][1], us(lambda: launch(po, pl, out, None, None))))
    parts = [("torch.compiler.is_compiling()", us(torch.compiler.is_compiling)),
             ("po.new_empty(b, hl, d)", us(lambda: po.new_empty(b, hl, d)))]
    ctx.check()
    if dist.get_rank() == 0:
        topo = ctx.topology()
        print(f"host time per eager call, {cp} rank(s), batch {b}, Hl {hl}, D {d}, bf16; {topo['path']} path "
              f"({topo.get('provider', '?')}); torch {torch.__version__}, nccl_dcp {nccl_dcp.__version__}, "
              f"Python {sys.version.split()[0]}; eager path: {paths[0][0]}")
        for name, t in rows[:5]:
            print(f"{t:8.2f} us  {name}")
        t = dict(rows)
        print(f"ratio preallocated: {t['ctx(po, pl, out=out)'] / t['torch.add(po, po, out=po2)']:.2f} "
              f"(ctx(po, pl, out=out) / torch.add(po, po, out=po2)); allocating: "
              f"{t['ctx(po, pl)'] / t['torch.add(po, po)']:.2f} (ctx(po, pl) / torch.add(po, po)); target <= 1.5")
        for name, t in rows[5:]:
            print(f"{t:8.2f} us  {name}")
        print("ctx(po, pl, out=out) = launch() (tensors read, layout found, library called) + the Python around it:")
        for name, total, launch_us in paths:
            print(f"{launch_us:8.2f} us  launch() + {total - launch_us:5.2f} us Python  [{name}]")
        for name, t in parts:
            print(f"{t:8.2f} us  {name}")
    torch.cuda.synchronize()
    ctx.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
