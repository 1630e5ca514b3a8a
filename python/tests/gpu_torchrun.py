"""GPU tests of nccl_dcp on PyTorch's own NCCL communicator, against the
plain PyTorch path (nccl_dcp.reference: all_to_all_single of the partials
and LSEs, then the merge in fp32). One process per GPU:

    NCCL_DCP_LIB=build/libnccl_dcp.so PYTHONPATH=python \\
        torchrun --nproc-per-node <GPUs> python/tests/gpu_torchrun.py [--junit FILE]

Every rank runs the same cases in the same order. A case's verdict is the
all-reduced (max) count of mismatches and failures, so the ranks agree and
stay in step. Rank 0 prints one line per case, then `N passed, N failed`;
the exit status is 1 when anything failed.
"""

import argparse
import os
import sys
import time
import traceback
import xml.etree.ElementTree as et
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import nccl_dcp  # noqa: E402
from nccl_dcp import reference  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
INF = float("inf")
DEVICE = "cuda"  # test_gpu_suite_dry.py runs the suite's bookkeeping on CPU


# ---- inputs

class Inputs:
    """One call's tensors, in one of the layouts the API accepts, with the
    LSE corner cases of the header planted at rows that all ranks agree on."""

    def __init__(self, layout, batch, cp, hl, d, dtype, seed, rank, device=None):
        device = device or DEVICE
        self.layout, self.hl = layout, hl
        g = torch.Generator(device=device).manual_seed(seed * 1009 + rank)
        pad = 16 // torch.tensor([], dtype=dtype).element_size()  # 16 bytes of padding
        if layout == "packed":       # [B, cp*Hl, D] and [B, cp*Hl], both contiguous
            self.po = torch.empty(batch, cp * hl, d, dtype=dtype, device=device)
            self.pl = torch.empty(batch, cp * hl, device=device)
        elif layout == "transposed":  # the attention kernel's [B, Hl, cp, D], seen as [B, cp, Hl, D]
            self.po = torch.empty(batch, hl, cp, d, dtype=dtype, device=device).transpose(1, 2)
            self.pl = torch.empty(batch, hl, cp, device=device).transpose(1, 2)
        elif layout == "padded":     # rows and heads padded: [B, cp*Hl, D + pad][..., :D]
            self.po = torch.empty(batch, cp * hl, d + pad, dtype=dtype, device=device)[..., :d]
            self.pl = torch.empty(batch, cp * hl + 3, device=device)[:, :cp * hl]
        else:
            raise ValueError(layout)
        self.fill(g, rank)

    def fill(self, g, rank):
        """Random partials and LSEs, then the corner cases (same rows on every rank):
        b % 4 == 1: head 0 is -inf with a NaN payload on every rank (an empty merge);
        b % 4 == 2: head 1 is NaN (even ranks) or +inf (odd ranks), NaN payload, on
                    the ranks where (b // 4 + rank) is even (a partly empty merge);
        b % 4 == 3: LSEs shifted by +80 (no overflow: the max is subtracted)."""
        batch, hl = self.po.shape[0], self.hl
        po = self.po.unflatten(1, (-1, hl)) if self.po.dim() == 3 else self.po  # views: [B, cp, Hl, D]
        pl = self.pl.unflatten(1, (-1, hl)) if self.pl.dim() == 2 else self.pl  # and [B, cp, Hl]
        po.copy_(torch.randn(po.shape, generator=g, device=po.device))
        pl.copy_(torch.rand(pl.shape, generator=g, device=pl.device) * 8 - 4)
        rows = torch.arange(batch, device=po.device)
        empty = rows % 4 == 1
        po[empty, :, 0] = float("nan")
        pl[empty, :, 0] = -INF
        if hl > 1:
            partly = (rows % 4 == 2) & ((rows // 4 + rank) % 2 == 0)
            po[partly, :, 1] = float("nan")
            pl[partly, :, 1] = float("nan") if rank % 2 == 0 else INF
        pl[rows % 4 == 3] += 80

    def reference(self, lse_base, group):
        parts, lses = reference.exchange(self.po, self.pl, self.hl, group)
        return reference.merge(parts, lses, lse_base)


def strided_outputs(batch, hl, d, dtype):
    """out [B, Hl, D + pad][..., :D] and out_lse [B, Hl + 3][:, :Hl]."""
    pad = 16 // torch.tensor([], dtype=dtype).element_size()
    out = torch.full((batch, hl, d + pad), float("nan"), dtype=dtype, device=DEVICE)[..., :d]
    out_lse = torch.full((batch, hl + 3), float("nan"), device=DEVICE)[:, :hl]
    return out, out_lse


def poison(*tensors):
    for t in tensors:
        t.fill_(float("nan"))


# ---- cases: each returns this rank's count of mismatches (0 = pass)

class Suite:
    def __init__(self, group):
        self.group = group
        self.rank, self.cp = dist.get_rank(group), dist.get_world_size(group)
        self.cases = []

    def case(self, name, fn):
        self.cases.append((name, fn))

    def run(self):
        results = []
        for name, fn in self.cases:
            start = time.perf_counter()
            detail = ""
            try:
                bad = int(fn())
            except Exception as e:  # a failure on one rank is this rank's verdict, not a crash
                bad, detail = 1, f"{type(e).__name__}: {e}"
                traceback.print_exc()
            verdict = torch.tensor([bad], device=DEVICE)
            dist.all_reduce(verdict, op=dist.ReduceOp.MAX, group=self.group)
            results.append((name, verdict.item(), detail, time.perf_counter() - start))
            if self.rank == 0:
                status = "PASS" if verdict.item() == 0 else f"FAIL ({verdict.item()} wrong)"
                print(f"{status:>10}  {name}{'  ' + detail if detail else ''}", flush=True)
            elif detail:
                print(f"[rank {self.rank}] {name}: {detail}", flush=True)
        return results


def call_and_compare(ctx, inputs, lse_base, group, out_mode):
    """One call in one output mode, compared with the reference: 'alloc'
    (out allocated by the call, no LSE), 'return_lse', or 'strided'."""
    batch, hl, d = inputs.po.shape[0], ctx.spec.local_heads, ctx.spec.head_dim
    if out_mode == "alloc":
        out, out_lse = ctx(inputs.po, inputs.pl), None
    elif out_mode == "return_lse":
        out, out_lse = ctx(inputs.po, inputs.pl, return_lse=True)
    else:
        out, out_lse = strided_outputs(batch, hl, d, inputs.po.dtype)
        ctx(inputs.po, inputs.pl, out=out, out_lse=out_lse)
    want, want_lse = inputs.reference(lse_base, group)
    return reference.count_mismatches(out, out_lse, want, want_lse if out_lse is not None else None).item()


def add_matrix(suite, group):
    """Every dtype x both LSE bases x three input layouts x three batch sizes
    (300 > max_batch: the call runs in chunks)."""
    hl, d = 4, 128
    modes = {"packed": "alloc", "transposed": "return_lse", "padded": "strided"}
    for dname, dtype in DTYPES.items():
        for base in (2, "e"):
            state = {}

            def create(dtype=dtype, base=base, state=state):
                state["ctx"] = nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype=dtype, lse_base=base,
                                                max_batch=128)
                return 0

            suite.case(f"create/{dname}/base{base}", create)
            for layout, mode in modes.items():
                for batch in (1, 37, 300):
                    def one(dtype=dtype, base=base, layout=layout, mode=mode, batch=batch, state=state):
                        inputs = Inputs(layout, batch, suite.cp, hl, d, dtype, seed=batch, rank=suite.rank)
                        return call_and_compare(state["ctx"], inputs, base, group, mode)
                    suite.case(f"matrix/{dname}/base{base}/{layout}/{mode}/B{batch}", one)
            suite.case(f"close/{dname}/base{base}", lambda state=state: state.pop("ctx").close() or 0)


def add_mla_shape(suite, group):
    """DeepSeek's MLA decode shape: D = 512 (the latent), 16 local heads, bf16."""
    def run():
        bad = 0
        with nccl_dcp.Context(group, head_dim=512, local_heads=16, dtype=torch.bfloat16, lse_base=2) as ctx:
            for batch in (1, 64, 256):
                inputs = Inputs("transposed", batch, suite.cp, 16, 512, torch.bfloat16, seed=7, rank=suite.rank)
                bad += call_and_compare(ctx, inputs, 2, group, "strided")
        return bad
    suite.case("mla/bf16/D512/Hl16/B1,64,256", run)


def add_protocols(suite, group):
    for proto in ("LL", "LL128", "SIMPLE"):
        def run(proto=proto):
            bad = 0
            with nccl_dcp.Context(group, head_dim=128, local_heads=4, dtype=torch.bfloat16, lse_base="e",
                                  protocol=proto, max_batch=64) as ctx:
                if ctx.topology()["path"] == "fused" and ctx.topology()["protocol"] != proto:
                    raise AssertionError(f"topology reports protocol {ctx.topology()['protocol']}")
                for batch in (5, 200):
                    inputs = Inputs("padded", batch, suite.cp, 4, 128, torch.bfloat16, seed=batch, rank=suite.rank)
                    bad += call_and_compare(ctx, inputs, "e", group, "strided")
            return bad
        suite.case(f"protocol/{proto}", run)


def add_graphs(suite, group):
    """Two calls captured in one CUDA graph (the second over max_batch: in
    chunks), replayed with fresh inputs copied into the captured tensors."""
    hl, d = 4, 128
    for dname, base in (("bf16", 2), ("fp32", "e")):
        dtype, state = DTYPES[dname], {}

        def capture(dtype=dtype, base=base, state=state):
            ctx = nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype=dtype, lse_base=base, max_batch=64)
            a = Inputs("packed", 8, suite.cp, hl, d, dtype, seed=1, rank=suite.rank)
            b = Inputs("transposed", 100, suite.cp, hl, d, dtype, seed=2, rank=suite.rank)
            out_b, lse_b = strided_outputs(100, hl, d, dtype)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm-up on the stream the graph captures on
                ctx(a.po, a.pl)
                ctx(b.po, b.pl, out=out_b, out_lse=lse_b)
            stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                out_a, lse_a = ctx(a.po, a.pl, return_lse=True)  # allocated from the graph's pool
                ctx(b.po, b.pl, out=out_b, out_lse=lse_b)
            state.update(ctx=ctx, graph=graph, a=a, b=b, outs=(out_a, lse_a, out_b, lse_b))
            return 0

        def replay(i, base=base, state=state):
            a, b = state["a"], state["b"]
            out_a, lse_a, out_b, lse_b = state["outs"]
            for inputs, seed in ((a, 100 + i), (b, 200 + i)):
                inputs.fill(torch.Generator(device="cuda").manual_seed(seed * 1009 + suite.rank), suite.rank)
            poison(out_a, lse_a, out_b, lse_b)
            state["graph"].replay()
            torch.cuda.synchronize()
            bad = 0
            for inputs, out, lse in ((a, out_a, lse_a), (b, out_b, lse_b)):
                want, want_lse = inputs.reference(base, group)
                bad += reference.count_mismatches(out, lse, want, want_lse).item()
            return bad

        def release(state=state):
            err = state["ctx"].async_error()
            state.pop("graph")
            state.pop("ctx").close()
            if err is not None:
                raise err
            return 0

        suite.case(f"graph/{dname}/base{base}/capture", capture)
        for i in range(4):
            suite.case(f"graph/{dname}/base{base}/replay{i}", lambda i=i, replay=replay: replay(i))
        suite.case(f"graph/{dname}/base{base}/close", release)


def expect(exc_type, pattern, fn):
    """0 when fn raises exc_type with pattern in its message, else 1."""
    try:
        fn()
    except exc_type as e:
        if pattern in str(e):
            return 0
        raise AssertionError(f"{type(e).__name__} without {pattern!r}: {e}") from e
    raise AssertionError(f"no {exc_type.__name__} ({pattern!r})")


def add_api(suite, group):
    hl, d = 4, 128

    def errors():
        bad = 0
        with nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype="bf16", lse_base=2) as ctx:
            x = Inputs("packed", 4, suite.cp, hl, d, torch.bfloat16, seed=3, rank=suite.rank)
            bad += expect(ValueError, "partial_out is on cpu", lambda: ctx(x.po.cpu(), x.pl))
            bad += expect(ValueError, "partial_out has dtype float16", lambda: ctx(x.po.half(), x.pl))
            ctx(x.po, x.pl)  # binds the current stream
            other = torch.cuda.Stream()
            bad += expect(ValueError, "ctx.bind_stream(stream)", lambda: ctx(x.po, x.pl, stream=other))
            # out inside partial_out: only the library sees the overlap.
            bad += expect(nccl_dcp.NcclDcpArgumentError, "out overlaps partialOut",
                          lambda: ctx(x.po, x.pl, out=x.po[:, :hl]))
            torch.cuda.synchronize()
            ctx.bind_stream(other)
            with torch.cuda.stream(other):
                bad += call_and_compare(ctx, x, 2, group, "alloc")
            torch.cuda.synchronize()
        bad += expect(ValueError, "the context is closed", lambda: ctx(x.po, x.pl))
        return bad

    def batch_zero():
        with nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype="fp16", lse_base="e") as ctx:
            x = Inputs("packed", 0, suite.cp, hl, d, torch.float16, seed=4, rank=suite.rank)
            out, out_lse = ctx(x.po, x.pl, return_lse=True)
            return int(tuple(out.shape) != (0, hl, d) or tuple(out_lse.shape) != (0, hl))

    def raw_comm_pointer():
        from nccl_dcp import _torch
        comm = _torch.comm_ptr_of(group)
        with nccl_dcp.Context(comm, head_dim=d, local_heads=hl, dtype=torch.float32, lse_base=2) as ctx:
            x = Inputs("padded", 9, suite.cp, hl, d, torch.float32, seed=5, rank=suite.rank)
            return call_and_compare(ctx, x, 2, group, "strided")

    def path():
        """One node: the fused path, unless NCCL_DCP_FORCE_FALLBACK=1 asks for the fallback."""
        want = "fallback" if os.environ.get("NCCL_DCP_FORCE_FALLBACK") == "1" else "fused"
        with nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype="bf16", lse_base=2) as ctx:
            topo = ctx.topology()
            if suite.rank == 0:
                print(f"            topology: {topo['path']} path, protocol {topo['protocol']}, "
                      f"lsa_size {topo['lsa_size']}, links {topo['links']}", flush=True)
            return int(topo["path"] != want or topo["n_ranks"] != suite.cp or topo["rank"] != suite.rank)

    suite.case("api/errors", errors)
    suite.case("api/batch0", batch_zero)
    suite.case("api/raw_comm_pointer", raw_comm_pointer)
    suite.case("api/path_on_one_node", path)


# ---- main

def write_junit(path, results):
    suite = et.Element("testsuite", name="python_gpu", tests=str(len(results)),
                       failures=str(sum(1 for r in results if r[1])))
    for name, bad, detail, seconds in results:
        case = et.SubElement(suite, "testcase", classname="python_gpu", name=name, time=f"{seconds:.3f}")
        if bad:
            et.SubElement(case, "failure", message=detail or f"{bad} wrong")
    root = et.Element("testsuites")
    root.append(suite)
    et.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junit", help="write the results as JUnit XML (rank 0)")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank), timeout=timedelta(seconds=120))
    group = dist.group.WORLD
    suite = Suite(group)
    if suite.rank == 0:
        lib = nccl_dcp.library()
        print(f"nccl_dcp on {suite.cp} rank(s): {lib.path} (version {lib.version}), NCCL "
              f"{'.'.join(map(str, lib.nccl_version))}, torch {torch.__version__} (NCCL "
              f"{'.'.join(map(str, torch.cuda.nccl.version()))})", flush=True)
    add_api(suite, group)
    add_matrix(suite, group)
    add_mla_shape(suite, group)
    add_protocols(suite, group)
    add_graphs(suite, group)
    results = suite.run()
    failed = sum(1 for r in results if r[1])
    if suite.rank == 0:
        if args.junit:
            write_junit(args.junit, results)
        print(f"{len(results) - failed} passed, {failed} failed", flush=True)
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
