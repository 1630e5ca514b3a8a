"""GPU tests of nccl_dcp on PyTorch's own NCCL communicator, against the
plain PyTorch path (nccl_dcp.reference: all_to_all_single of the partials
and LSEs, then the merge in fp32). One process per GPU:

    NCCL_DCP_LIB=build/libnccl_dcp.so PYTHONPATH=python \\
        torchrun --nproc-per-node <GPUs> python/tests/gpu_torchrun.py [--junit FILE]

Every rank runs the same cases in the same order. A case's verdict is the
all-reduced (max) count of mismatches and failures, so the ranks agree and
stay in step; a case that cannot run here (e.g. needs 2 ranks) raises Skip
on every rank. Every result is compared with the float64 merge (on the
CPU) of the partials exchanged by torch's all_to_all_single, on fresh random
data: each case draws its own seeds (Suite.seed) from the run's base seed,
which rank 0 picks (or --seed N gives) and prints at the start; a failed
case's line names its seed, and `--seed BASE` replays the run. Outputs the
test passes (out=, out_lse=) are poisoned (NaN) first; outputs the library
allocates are held (see held()): no earlier merge's answer can sit in their
memory. Rank 0 prints one line per case, then `N passed, N failed, N
skipped`; the exit status is 1 when anything failed.

Run the suite again with NCCL_CUMEM_ENABLE=0 exported (vLLM's setting):
the context must then land on the cuda-ipc provider (library >= 0.2).
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
from nccl_dcp import flashinfer, reference, vllm  # noqa: E402  (the drop-ins)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
INF = float("inf")
DEVICE = "cuda"  # test_gpu_suite_dry.py runs the suite's bookkeeping on CPU


# ---- inputs

class Inputs:
    """One call's tensors, in one of the layouts the API accepts, with the
    LSE corner cases of the header planted at rows that all ranks agree on."""

    def __init__(self, layout, batch, cp, hl, d, dtype, seed, rank, device=None, lse_dtype=torch.float32):
        device = device or DEVICE
        self.layout, self.hl = layout, hl
        g = torch.Generator(device=device).manual_seed(seed * 1009 + rank)
        pad = 16 // torch.tensor([], dtype=dtype).element_size()  # 16 bytes of padding
        if layout == "packed":       # [B, cp*Hl, D] and [B, cp*Hl], both contiguous
            self.po = torch.empty(batch, cp * hl, d, dtype=dtype, device=device)
            self.pl = torch.empty(batch, cp * hl, dtype=lse_dtype, device=device)
        elif layout == "transposed":  # the attention kernel's [B, Hl, cp, D], seen as [B, cp, Hl, D]
            self.po = torch.empty(batch, hl, cp, d, dtype=dtype, device=device).transpose(1, 2)
            self.pl = torch.empty(batch, hl, cp, dtype=lse_dtype, device=device).transpose(1, 2)
        elif layout == "padded":     # rows and heads padded: [B, cp*Hl, D + pad][..., :D]
            self.po = torch.empty(batch, cp * hl, d + pad, dtype=dtype, device=device)[..., :d]
            self.pl = torch.empty(batch, cp * hl + 3, dtype=lse_dtype, device=device)[:, :cp * hl]
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

    def reference(self, lse_base, group, scatter="head", row_counts=None, seq_lens=None, query_start_loc=None):
        """The float64 merge of the exchanged partials (the scatter mode's
        sources: nccl_dcp.reference.sources), on the CPU, returned on the
        inputs' device."""
        parts, lses = reference.sources(self.po, self.pl, self.hl, scatter, row_counts, seq_lens, query_start_loc,
                                        group)
        out, lse = reference.merge(parts.cpu().double(), lses.cpu().double(), lse_base, dtype=torch.float64)
        return out.to(self.po.device), lse.to(self.po.device)

    def plant_empty(self, seq_lens, query_start_loc):
        """What attention leaves in the rows that are empty on this rank:
        NaN payloads behind a large finite LSE (it would win the merge if the
        row were not masked)."""
        empty = reference.empty_rows(self.po.shape[0], seq_lens, query_start_loc).to(self.po.device)
        po = self.po.unflatten(1, (-1, self.hl)) if self.po.dim() == 3 else self.po
        pl = self.pl.unflatten(1, (-1, self.hl)) if self.pl.dim() == 2 else self.pl
        po[empty] = float("nan")
        pl[empty] = 50.0

    def refill(self, seed, rank):
        """Fresh random data in the same tensors (captured graphs read them)."""
        self.fill(torch.Generator(device=self.po.device).manual_seed(seed * 1009 + rank), rank)


# Every output a merge is written to, alive until the process ends: the
# caching allocator never hands a block of one back, so an output the library
# allocates later cannot sit where an earlier call left a correct answer (a
# kernel that wrote nothing would pass). What such an output can find is
# memory that held inputs or temporaries, of other data (fresh seeds per case).
HELD = []
HELD_RANGES = []  # (data_ptr, nbytes) of HELD's storages
ALIASED = []      # the running case's outputs that overlapped a held one (Suite.run counts them)


def held(*tensors):
    """Registers fresh outputs (the library's, or the test's poisoned ones):
    each must share no memory with an output held before -- trivially so
    for a new allocation, since those are alive; a library that handed back
    an earlier output, or a cached buffer, fails here: counted against the
    case (not raised: a rank must not skip the collectives that follow) --
    then holds it. Returns the tensors (one, or a tuple). Zero-byte tensors
    are skipped."""
    for t in tensors:
        storage = t.untyped_storage()
        lo, n = storage.data_ptr(), storage.nbytes()
        if n == 0:
            continue
        for other_lo, other_n in HELD_RANGES:
            if lo < other_lo + other_n and other_lo < lo + n:
                ALIASED.append(f"an output at {lo:#x} (+{n} bytes) overlaps an earlier output at {other_lo:#x} "
                               f"(+{other_n} bytes)")
                print(f"[rank {dist.get_rank()}] {ALIASED[-1]}", flush=True)
                break
        HELD.append(t)
        HELD_RANGES.append((lo, n))
    return tensors[0] if len(tensors) == 1 else tensors


def nan_full(shape, dtype=torch.float32):
    """A NaN-poisoned output, held (see held())."""
    return held(torch.full(shape, float("nan"), dtype=dtype, device=DEVICE))


def strided_outputs(batch, hl, d, dtype):
    """out [B, Hl, D + pad][..., :D] and out_lse [B, Hl + 3][:, :Hl], NaN, held."""
    pad = 16 // torch.tensor([], dtype=dtype).element_size()
    out = nan_full((batch, hl, d + pad), dtype)[..., :d]
    out_lse = nan_full((batch, hl + 3))[:, :hl]
    return out, out_lse


def poison(*tensors):
    for t in tensors:
        t.fill_(float("nan"))


def not_nan(*tensors):
    """Entries of the tensors that are not NaN (a poisoned region written)."""
    return sum(int((~torch.isnan(t.float())).sum().item()) for t in tensors)


# ---- cases: each returns this rank's count of mismatches (0 = pass)

class Skip(Exception):
    """Raised by a case, on every rank alike, that cannot run here."""


SEED_STRIDE = 1024  # seeds a case may draw: case i's are base + i * SEED_STRIDE + [0, SEED_STRIDE)


class Suite:
    def __init__(self, group, seed=None):
        self.group = group
        self.rank, self.cp = dist.get_rank(group), dist.get_world_size(group)
        self.cases = []
        self.requested_seed = seed  # --seed: the base seed of a run to replay
        self.base_seed = None       # agreed by run()
        self.case_seed = None       # the running case's first seed
        self.draws = 0

    def case(self, name, fn):
        self.cases.append((name, fn))

    def seed(self):
        """A fresh seed for the running case's next inputs: its first seed
        (the run's base + SEED_STRIDE x its index), then the next ones. Every
        rank draws the same ones (they run the same code; Inputs mixes in
        the rank), and the same base replays them."""
        if self.draws >= SEED_STRIDE:
            raise AssertionError(f"a case drew more than {SEED_STRIDE} seeds")
        self.draws += 1
        return self.case_seed + self.draws - 1

    def agree_seed(self):
        """The run's base seed: --seed's, else a random one, rank 0's on every rank."""
        mine = self.requested_seed if self.requested_seed is not None else int.from_bytes(os.urandom(4), "little") >> 1
        seed = torch.tensor([mine if self.rank == 0 else 0], dtype=torch.int64, device=DEVICE)
        dist.all_reduce(seed, op=dist.ReduceOp.MAX, group=self.group)  # >= 0: rank 0's
        self.base_seed = int(seed.item())
        if self.rank == 0:
            print(f"seed {self.base_seed} (replay the run with --seed {self.base_seed})", flush=True)

    def replay_note(self, index):
        return f"seed {self.base_seed + index * SEED_STRIDE}, replay with --seed {self.base_seed}"

    def run(self):
        """[(name, wrong, detail, seconds, skipped)]"""
        self.agree_seed()
        results = []
        for index, (name, fn) in enumerate(self.cases):
            self.case_seed, self.draws = self.base_seed + index * SEED_STRIDE, 0
            start = time.perf_counter()
            detail, skipped = "", 0
            ALIASED.clear()
            try:
                bad = int(fn()) + len(ALIASED)
            except Skip as e:
                bad, skipped, detail = 0, 1, f"skipped: {e}"
            except Exception as e:  # a failure on one rank is this rank's verdict, not a crash
                bad, detail = 1, f"{type(e).__name__}: {e}"
                traceback.print_exc()
            verdict = torch.tensor([bad, skipped], device=DEVICE)
            dist.all_reduce(verdict, op=dist.ReduceOp.MAX, group=self.group)
            wrong, skipped = verdict.tolist()
            results.append((name, wrong, detail, time.perf_counter() - start, skipped))
            if self.rank == 0:
                status = f"FAIL ({wrong} wrong)" if wrong else "SKIP" if skipped else "PASS"
                note = f"  ({self.replay_note(index)})" if wrong else ""
                print(f"{status:>10}  {name}{'  ' + detail if detail else ''}{note}", flush=True)
            elif detail and not skipped:
                print(f"[rank {self.rank}] {name}: {detail} ({self.replay_note(index)})", flush=True)
        return results


def compare(inputs, out, out_lse, lse_base, group):
    """Mismatches of (out, out_lse) against the float64 reference of inputs (out_lse may be None)."""
    want, want_lse = inputs.reference(lse_base, group)
    return reference.count_mismatches(out, out_lse, want, want_lse if out_lse is not None else None).item()


def call_and_compare(ctx, inputs, lse_base, group, out_mode):
    """One call in one output mode, compared with the reference: 'alloc'
    (out allocated by the call, no LSE), 'return_lse' (out and out_lse
    allocated by the call; both held), or 'strided' (NaN-poisoned outputs
    passed in)."""
    batch, hl, d = inputs.po.shape[0], ctx.spec.local_heads, ctx.spec.head_dim
    if out_mode == "alloc":
        out, out_lse = held(ctx(inputs.po, inputs.pl)), None
    elif out_mode == "return_lse":
        out, out_lse = held(*ctx(inputs.po, inputs.pl, return_lse=True))
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
                        inputs = Inputs(layout, batch, suite.cp, hl, d, dtype, seed=suite.seed(), rank=suite.rank)
                        return call_and_compare(state["ctx"], inputs, base, group, mode)
                    suite.case(f"matrix/{dname}/base{base}/{layout}/{mode}/B{batch}", one)
            suite.case(f"close/{dname}/base{base}", lambda state=state: state.pop("ctx").close() or 0)


def add_mla_shape(suite, group):
    """DeepSeek's MLA decode shape: D = 512 (the latent), 16 local heads, bf16."""
    def run():
        bad = 0
        with nccl_dcp.Context(group, head_dim=512, local_heads=16, dtype=torch.bfloat16, lse_base=2) as ctx:
            for batch in (1, 64, 256):
                inputs = Inputs("transposed", batch, suite.cp, 16, 512, torch.bfloat16, seed=suite.seed(),
                                rank=suite.rank)
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
                    inputs = Inputs("padded", batch, suite.cp, 4, 128, torch.bfloat16, seed=suite.seed(),
                                    rank=suite.rank)
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
            a = Inputs("packed", 8, suite.cp, hl, d, dtype, seed=suite.seed(), rank=suite.rank)
            b = Inputs("transposed", 100, suite.cp, hl, d, dtype, seed=suite.seed(), rank=suite.rank)
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

        def replay(base=base, state=state):
            a, b = state["a"], state["b"]
            out_a, lse_a, out_b, lse_b = state["outs"]
            for inputs in (a, b):
                inputs.refill(suite.seed(), suite.rank)
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
            suite.case(f"graph/{dname}/base{base}/replay{i}", replay)
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
            x = Inputs("packed", 4, suite.cp, hl, d, torch.bfloat16, seed=suite.seed(), rank=suite.rank)
            bad += expect(ValueError, "partial_out is on cpu", lambda: ctx(x.po.cpu(), x.pl))
            bad += expect(ValueError, "partial_out has dtype float16", lambda: ctx(x.po.half(), x.pl))
            bad += expect(ValueError, "out is on cpu", lambda: ctx(x.po, x.pl, out=torch.empty(
                4, hl, d, dtype=torch.bfloat16)))
            # out inside partial_out: only the library sees the overlap.
            bad += expect(nccl_dcp.NcclDcpArgumentError, "out overlaps partialOut",
                          lambda: ctx(x.po, x.pl, out=x.po[:, :hl]))
            # Another stream, with no bind_stream (a documented no-op now) and no synchronization.
            ctx(x.po, x.pl)
            other = torch.cuda.Stream()
            other.wait_stream(torch.cuda.current_stream())
            ctx.bind_stream(other)
            with torch.cuda.stream(other):
                out = held(ctx(x.po, x.pl))
            torch.cuda.current_stream().wait_stream(other)
            bad += compare(x, out, None, 2, group)
            ctx.check()
            if not os.environ.get("NCCL_DCP_TIMEOUT_MS"):
                bad += int(ctx.timeout_ms != 120000)  # the process group's timeout (main(): 120 s)
        bad += expect(ValueError, "the context is closed", lambda: ctx(x.po, x.pl))
        ctx.close()  # idempotent
        ctx.abort()
        return bad

    def batch_zero():
        with nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype="fp16", lse_base="e") as ctx:
            x = Inputs("packed", 0, suite.cp, hl, d, torch.float16, seed=suite.seed(), rank=suite.rank)
            out, out_lse = ctx(x.po, x.pl, return_lse=True)
            return int(tuple(out.shape) != (0, hl, d) or tuple(out_lse.shape) != (0, hl))

    def raw_comm_pointer():
        from nccl_dcp import _torch
        comm = _torch.comm_ptr_of(group)
        with nccl_dcp.Context(comm, head_dim=d, local_heads=hl, dtype=torch.float32, lse_base=2) as ctx:
            x = Inputs("padded", 9, suite.cp, hl, d, torch.float32, seed=suite.seed(), rank=suite.rank)
            return call_and_compare(ctx, x, 2, group, "strided")

    def path():
        """One node: the fused path, unless NCCL_DCP_FORCE_FALLBACK=1 or NCCL_DCP_PROVIDER=fallback
        asks for the fallback. From library 0.2 on, the provider too: the one NCCL_DCP_PROVIDER
        names, else cuda-ipc under NCCL_CUMEM_ENABLE=0 (no NCCL window then), else nccl-window."""
        provider = os.environ.get("NCCL_DCP_PROVIDER", "auto")
        fallback = os.environ.get("NCCL_DCP_FORCE_FALLBACK") == "1" or provider == "fallback"
        want = "fallback" if fallback else "fused"
        if provider == "auto":
            provider = ("fallback" if fallback else "cuda-ipc" if os.environ.get("NCCL_CUMEM_ENABLE") == "0"
                        else "nccl-window")
        with nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype="bf16", lse_base=2) as ctx:
            topo = ctx.topology()
            if suite.rank == 0:
                print(f"            topology: {topo['path']} path, provider {topo['provider']}, protocol "
                      f"{topo['protocol']}, lsa_size {topo['lsa_size']}, links {topo['links']}"
                      f"{', note: ' + topo['path_note'] if topo['path_note'] else ''} "
                      f"(NCCL_CUMEM_ENABLE={os.environ.get('NCCL_CUMEM_ENABLE', 'unset')})", flush=True)
            bad = int(topo["path"] != want or topo["n_ranks"] != suite.cp or topo["rank"] != suite.rank)
            if nccl_dcp.library().version >= 200 and topo["provider"] != provider:
                print(f"[rank {suite.rank}] provider {topo['provider']}, expected {provider}", flush=True)
                bad += 1
            return bad

    suite.case("api/errors", errors)
    suite.case("api/batch0", batch_zero)
    suite.case("api/raw_comm_pointer", raw_comm_pointer)
    suite.case("api/path_on_one_node", path)


# ---- streams, as in NCCL: any stream, no bind_stream (issue 24)

def fresh(suite, layout, batch, hl, d, dtype):
    """Inputs of a fresh seed (Suite.seed)."""
    return Inputs(layout, batch, suite.cp, hl, d, dtype, seed=suite.seed(), rank=suite.rank)


def add_streams(suite, group):
    hl, d, dtype = 4, 128, torch.bfloat16

    def context(**kwargs):
        return nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype=dtype, lse_base=2, max_batch=64, **kwargs)

    def graph_recipe():
        """PyTorch's documented recipe: an eager call on the current stream,
        warm-up on a side stream, then `with torch.cuda.graph(g)` (its own
        capture stream); replays with fresh data."""
        bad = 0
        with context() as ctx:
            x = fresh(suite, "transposed", 70, hl, d, dtype)  # 70 > max_batch: two chunks
            out, lse = strided_outputs(70, hl, d, dtype)
            ctx(x.po, x.pl, out=out, out_lse=lse)
            bad += compare(x, out, lse, 2, group)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    ctx(x.po, x.pl, out=out, out_lse=lse)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                ctx(x.po, x.pl, out=out, out_lse=lse)
            for i in range(3):
                x.refill(suite.seed(), suite.rank)
                poison(out, lse)
                graph.replay()
                torch.cuda.synchronize()
                bad += compare(x, out, lse, 2, group)
                # an eager call right after the replay, on the current stream, no sync between
                y = fresh(suite, "packed", 5, hl, d, dtype)
                out_y, lse_y = held(*ctx(y.po, y.pl, return_lse=True))
                bad += compare(y, out_y, lse_y, 2, group)
            ctx.check()
            del graph
        return bad

    def replay_on_another_stream():
        """Warm-up on one stream, capture on a second, replays on a third,
        each followed at once by an eager call on the current stream."""
        bad = 0
        with context() as ctx:
            warm, cap, play = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
            x = fresh(suite, "padded", 9, hl, d, dtype)
            out, lse = strided_outputs(9, hl, d, dtype)
            for s in (warm, cap, play):
                s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(warm):
                ctx(x.po, x.pl, out=out, out_lse=lse)
            warm.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=cap):
                ctx(x.po, x.pl, out=out, out_lse=lse)
            for i in range(3):
                x.refill(suite.seed(), suite.rank)
                poison(out, lse)
                y = fresh(suite, "packed", 33, hl, d, dtype)
                out_y, lse_y = strided_outputs(33, hl, d, dtype)
                play.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(play):
                    graph.replay()
                ctx(y.po, y.pl, out=out_y, out_lse=lse_y)  # current stream, not ordered after `play` by us
                torch.cuda.current_stream().wait_stream(play)
                torch.cuda.synchronize()
                bad += compare(x, out, lse, 2, group) + compare(y, out_y, lse_y, 2, group)
            ctx.check()
            del graph
        return bad

    def alternating_streams():
        """Eager calls alternating between two streams with no synchronization
        between them: only the library orders them on the context."""
        bad = 0
        with context() as ctx:
            streams = (torch.cuda.Stream(), torch.cuda.Stream())
            batches = (3, 100, 1, 64, 37, 2, 129, 8)
            inputs = [fresh(suite, ("packed", "transposed", "padded")[i % 3], b, hl, d, dtype)
                      for i, b in enumerate(batches)]
            outs = [strided_outputs(b, hl, d, dtype) for b in batches]  # NaN
            for s in streams:
                s.wait_stream(torch.cuda.current_stream())
            for i, (x, (out, lse)) in enumerate(zip(inputs, outs)):
                with torch.cuda.stream(streams[i % 2]):
                    ctx(x.po, x.pl, out=out, out_lse=lse)
            for s in streams:
                torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            for x, (out, lse) in zip(inputs, outs):
                bad += compare(x, out, lse, 2, group)
            ctx.check()
        return bad

    def dual_batch_overlap():
        """Two contexts on one communicator, one per micro-batch stream, in
        flight at once: eagerly, then captured in one graph (fork/join)."""
        bad = 0
        with context() as ctx_a, context() as ctx_b:
            sa, sb = torch.cuda.Stream(), torch.cuda.Stream()
            xa = [fresh(suite, "transposed", 48, hl, d, dtype) for _ in range(4)]
            xb = [fresh(suite, "transposed", 80, hl, d, dtype) for _ in range(4)]
            oa = [strided_outputs(48, hl, d, dtype) for _ in range(4)]
            ob = [strided_outputs(80, hl, d, dtype) for _ in range(4)]
            for s in (sa, sb):
                s.wait_stream(torch.cuda.current_stream())
            for i in range(4):
                with torch.cuda.stream(sa):
                    ctx_a(xa[i].po, xa[i].pl, out=oa[i][0], out_lse=oa[i][1])
                with torch.cuda.stream(sb):
                    ctx_b(xb[i].po, xb[i].pl, out=ob[i][0], out_lse=ob[i][1])
            for s in (sa, sb):
                torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            for i in range(4):
                bad += compare(xa[i], *oa[i], 2, group) + compare(xb[i], *ob[i], 2, group)

            cap = torch.cuda.Stream()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=cap):
                for s in (sa, sb):
                    s.wait_stream(cap)
                for layer in range(2):  # two "layers", each micro-batch on its own stream and context
                    with torch.cuda.stream(sa):
                        ctx_a(xa[layer].po, xa[layer].pl, out=oa[layer][0], out_lse=oa[layer][1])
                    with torch.cuda.stream(sb):
                        ctx_b(xb[layer].po, xb[layer].pl, out=ob[layer][0], out_lse=ob[layer][1])
                for s in (sa, sb):
                    cap.wait_stream(s)
            for i in range(3):
                for layer in range(2):
                    xa[layer].refill(suite.seed(), suite.rank)
                    xb[layer].refill(suite.seed(), suite.rank)
                    poison(*oa[layer], *ob[layer])
                graph.replay()
                torch.cuda.synchronize()
                for layer in range(2):
                    bad += compare(xa[layer], *oa[layer], 2, group) + compare(xb[layer], *ob[layer], 2, group)
            ctx_a.check()
            ctx_b.check()
            del graph
        return bad

    suite.case("streams/graph_recipe", graph_recipe)
    suite.case("streams/replay_on_another_stream", replay_on_another_stream)
    suite.case("streams/alternating", alternating_streams)
    suite.case("streams/dual_batch_overlap", dual_batch_overlap)


# ---- torch.compile: the torch.library op, no graph break

def add_compile(suite, group):
    hl, d, dtype = 4, 128, torch.bfloat16

    def compiled(mode):
        bad = 0
        with nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype=dtype, lse_base="e") as ctx:
            if mode == "default":
                def step(po, pl, out):
                    merged, lse = ctx(po, pl, return_lse=True)  # torch.ops.nccl_dcp.a2a_lse_reduce
                    ctx(po, pl, out=out)                         # torch.ops.nccl_dcp.a2a_lse_reduce_out
                    return merged * 2, lse
            else:  # CUDA graphs (cudagraph trees): the functional op only
                def step(po, pl, out):
                    merged, lse = ctx(po, pl, return_lse=True)
                    return merged * 2, lse
            fn = torch.compile(step, fullgraph=True, mode=None if mode == "default" else mode)
            # Fresh inputs (seeds) every step: the op's own out, which the graph allocates (or, under
            # reduce-overhead, a static buffer of the last replay), can only hold another step's answer.
            for _ in range(4):  # reduce-overhead: warm-up, record, then replays
                x = fresh(suite, "transposed", 24, hl, d, dtype)
                out = nan_full((24, hl, d), dtype)
                merged, lse = fn(x.po, x.pl, out)
                if mode == "default":  # new tensors each call (reduce-overhead's are the graph's static outputs)
                    held(merged, lse)
                merged, lse = (merged.float() / 2).to(dtype), lse.clone()  # before the next replay reuses them
                want, want_lse = x.reference("e", group)
                bad += reference.count_mismatches(merged, lse, want, want_lse).item()
                if mode == "default":
                    bad += reference.count_mismatches(out, None, want, None).item()
            ctx.check()
        return bad

    suite.case("compile/fullgraph", lambda: compiled("default"))
    suite.case("compile/reduce-overhead", lambda: compiled("reduce-overhead"))


# ---- failures cannot hide: a silent peer, a short timeout (runs last)

def add_failures(suite, group):
    hl, d, dtype = 4, 128, torch.bfloat16

    def silent_peer():
        """Rank 1 stays silent; rank 0's graph replay times out (1 s): ctx.check()
        raises, later replays write NaN at once, an eager call raises; both abort."""
        if suite.cp < 2:
            raise Skip("needs 2 ranks (rank 1 stays silent while rank 0 times out)")
        bad = 0
        ctx = nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype=dtype, lse_base=2, timeout_ms=1000)
        graph = None
        try:
            if ctx.timeout_ms != 1000:
                raise AssertionError(f"timeout_ms {ctx.timeout_ms}")
            if ctx.topology()["path"] != "fused":
                raise Skip("the context is on the fallback path: an ncclAlltoAll has no timeout")
            x = fresh(suite, "packed", 8, hl, d, dtype)
            out, lse = strided_outputs(8, hl, d, dtype)
            ctx(x.po, x.pl, out=out, out_lse=lse)  # a correct call first, on every rank
            bad += compare(x, out, lse, 2, group)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side):
                ctx(x.po, x.pl, out=out, out_lse=lse)
            torch.cuda.synchronize()
            if suite.rank == 0:
                graph.replay()  # rank 1 never calls: the device-side waits time out
                torch.cuda.synchronize()
                bad += expect(nccl_dcp.NcclDcpError, "ncclRemoteError", ctx.check)
                out.zero_()
                lse.zero_()
                start = time.perf_counter()
                graph.replay()  # poisoned: NaN at once
                torch.cuda.synchronize()
                seconds = time.perf_counter() - start
                not_nan = int((~torch.isnan(out)).sum()) + int((~torch.isnan(lse)).sum())
                if not_nan or seconds > 0.5:
                    print(f"[rank 0] poisoned replay: {not_nan} entries not NaN, {seconds:.3f} s", flush=True)
                bad += not_nan + int(seconds > 0.5)
                out.zero_()
                lse.zero_()
                bad += expect(nccl_dcp.NcclDcpError, "ncclRemoteError", lambda: ctx(x.po, x.pl, out=out, out_lse=lse))
                torch.cuda.synchronize()
                bad += int((~torch.isnan(out)).sum()) + int((~torch.isnan(lse)).sum())
        finally:
            graph = None
            ctx.abort()  # local on both ranks: never waits on the peer
        return bad

    def close_after_group_destroyed():
        """A context on a subgroup, the subgroup destroyed first: close() refuses
        (NcclDcpError) without touching the freed communicator."""
        sub = dist.new_group(list(range(suite.cp)))
        ctx = nccl_dcp.Context(sub, head_dim=d, local_heads=hl, dtype=dtype, lse_base=2)
        x = fresh(suite, "packed", 4, hl, d, dtype)
        bad = call_and_compare(ctx, x, 2, sub, "return_lse")
        torch.cuda.synchronize()
        dist.destroy_process_group(sub)
        bad += expect(nccl_dcp.NcclDcpError, "its process group was destroyed or aborted", ctx.close)
        return bad + int(not ctx.closed)

    suite.case("lifetime/close_after_group_destroyed", close_after_group_destroyed)
    suite.case("failure/silent_peer", silent_peer)


# ---- scatter modes, uneven token counts, bf16 LSEs, empty shards (issue 27)

def empty_shards(batch, rank, device=None):
    """seq_lens / query_start_loc (int32, on device) of this rank: sequences
    of 3 rows; sequence 1 is empty on every rank (out 0, out_lse -inf),
    sequence i (i != 1) on the ranks where (i + rank) % 3 == 0; past 4 rows
    the last 2 are padding (outside query_start_loc[-1])."""
    end = batch - 2 if batch > 4 else batch
    starts = list(range(0, end, 3)) or [0]
    lens = [0 if i == 1 or (i + rank) % 3 == 0 else 7 * i + 1 for i in range(len(starts))]
    device = device or DEVICE
    return (torch.tensor(lens, dtype=torch.int32, device=device),
            torch.tensor(starts + [end], dtype=torch.int32, device=device))


def token_counts(batch, cp, kind):
    """One TOKEN split (every rank computes the same): 'first' (rank 0 takes
    all), 'last', 'uneven' (rank p takes ~(p+1)/sum of it, zero-row ranks
    when batch < cp), or 'even' (the library's even split, given as counts)."""
    if kind == "first":
        return [batch] + [0] * (cp - 1)
    if kind == "last":
        return [0] * (cp - 1) + [batch]
    if kind == "even":
        return [batch // cp + (p < batch % cp) for p in range(cp)]
    weights = list(range(1, cp + 1))
    counts = [batch * w // sum(weights) for w in weights]
    counts[0] += batch - sum(counts)
    return counts


def mode_outputs(scatter, rows, hl, d, dtype, cp):
    """Strided, NaN-poisoned out and out_lse of a mode: [rows, heads, D + pad][..., :D], [rows, heads + 3][:, :heads]."""
    return strided_outputs(rows, hl if scatter == "head" else cp * hl, d, dtype)


def check_mode_call(suite, ctx, x, scatter, base, group, out_mode, row_counts=None, seq_lens=None,
                    query_start_loc=None):
    """One call of a mode ('alloc': out and out_lse made by the call, held;
    or NaN-poisoned 'strided' outputs), its shapes checked, compared with
    the reference."""
    batch, hl, d, cp = x.po.shape[0], x.hl, x.po.shape[-1], suite.cp
    heads = hl if scatter == "head" else cp * hl
    rows = batch
    if scatter == "token":
        rows = reference.row_starts(batch, cp, row_counts)
        rows = rows[suite.rank + 1] - rows[suite.rank]
    extra = dict(row_counts=row_counts, seq_lens=seq_lens, query_start_loc=query_start_loc)
    extra = {k: v for k, v in extra.items() if v is not None}
    if out_mode == "alloc":
        out, out_lse = held(*ctx(x.po, x.pl, return_lse=True, **extra))
    else:
        out, out_lse = mode_outputs(scatter, rows, hl, d, x.po.dtype, cp)
        ctx(x.po, x.pl, out=out, out_lse=out_lse, **extra)
    if tuple(out.shape) != (rows, heads, d) or tuple(out_lse.shape) != (rows, heads):
        raise AssertionError(f"out {tuple(out.shape)}, out_lse {tuple(out_lse.shape)}: expected ({rows}, {heads}, {d})")
    if out_lse.dtype != torch.float32:
        raise AssertionError(f"out_lse is {out_lse.dtype}")
    want, want_lse = x.reference(base, group, scatter, row_counts, seq_lens, query_start_loc)
    return reference.count_mismatches(out, out_lse, want, want_lse).item()


def add_modes(suite, group):
    """Each scatter mode x fp32 / bf16 partial LSEs: the even split at three
    batches (1 < cp when cp > 1; 150 > max_batch: chunks), empty shards by
    seq_lens / query_start_loc, and TOKEN's host counts (all rows on the
    first or the last rank, an uneven split)."""
    hl, d, base, dtype = 4, 128, "e", torch.bfloat16
    for scatter in ("head", "token", "none"):
        for lname, lse_dtype in (("lse_fp32", torch.float32), ("lse_bf16", torch.bfloat16)):
            state = {}

            def create(scatter=scatter, lse_dtype=lse_dtype, state=state):
                state["ctx"] = nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype=dtype, lse_base=base,
                                                max_batch=64, scatter=scatter, lse_dtype=lse_dtype)
                return 0

            tag = f"modes/{scatter}/{lname}"
            suite.case(f"{tag}/create", create)
            for layout, batch, out_mode in (("packed", 1, "alloc"), ("transposed", 37, "strided"),
                                            ("padded", 150, "alloc")):
                def even(scatter=scatter, lse_dtype=lse_dtype, layout=layout, batch=batch, out_mode=out_mode,
                         state=state):
                    x = Inputs(layout, batch, suite.cp, hl, d, dtype, suite.seed(), suite.rank, lse_dtype=lse_dtype)
                    return check_mode_call(suite, state["ctx"], x, scatter, base, group, out_mode)

                def shards(scatter=scatter, lse_dtype=lse_dtype, layout=layout, batch=batch, out_mode=out_mode,
                           state=state):
                    x = Inputs(layout, batch, suite.cp, hl, d, dtype, suite.seed(), suite.rank, lse_dtype=lse_dtype)
                    sl, qsl = empty_shards(batch, suite.rank, x.po.device)
                    x.plant_empty(sl, qsl)
                    return check_mode_call(suite, state["ctx"], x, scatter, base, group, out_mode, seq_lens=sl,
                                           query_start_loc=qsl)

                suite.case(f"{tag}/{layout}/B{batch}", even)
                suite.case(f"{tag}/{layout}/B{batch}/seq_lens", shards)
            if scatter == "token":
                for kind, batch in (("first", 9), ("last", 70), ("uneven", 37), ("uneven", 1)):
                    def host(lse_dtype=lse_dtype, kind=kind, batch=batch, state=state):
                        x = Inputs("transposed", batch, suite.cp, hl, d, dtype, seed=suite.seed(), rank=suite.rank,
                                   lse_dtype=lse_dtype)
                        counts = token_counts(batch, suite.cp, kind)
                        bad = check_mode_call(suite, state["ctx"], x, "token", base, group, "strided", counts)
                        sl, qsl = empty_shards(batch, suite.rank, x.po.device)  # counts and shards together
                        x.plant_empty(sl, qsl)
                        return bad + check_mode_call(suite, state["ctx"], x, "token", base, group, "alloc", counts,
                                                     sl, qsl)
                    suite.case(f"{tag}/row_counts/{kind}/B{batch}", host)
            suite.case(f"{tag}/close", lambda state=state: state.pop("ctx").close() or 0)


def fp8_mismatches(x, out, out_lse, lse_base, group, cp, rank):
    """Elements of an fp8-wire call (HEAD) off the float64 merge of the
    exchanged partials by more than the format allows, element by element
    (DESIGN §15): e4m3 moves a normal element by at most 2^-4 of itself, a
    subnormal one by at most half its step 2^-9 scale, scale = the unit's
    amax / 448 -- so out may move by the sum over the REMOTE sources s
    (a rank's own share stays exact) of w_s (2^-4 |x_s| + 2^-10 scale_s),
    plus out's own rounding and fp32's accumulation. A lost scale saturates
    (partials x1000), a unit decoded as another's is off by ~100%; with
    peers (cp > 1) some element must show fp8's rounding (the wire was
    narrowed at all). outLse as native's (the LSEs never narrow); a
    non-finite out where the merge is finite counts."""
    parts, lses = reference.sources(x.po, x.pl, x.hl, "head", group=group)  # [cp, B, Hl, D], [cp, B, Hl]
    parts, lses = parts.cpu().double(), lses.cpu().double()
    want, want_lse = reference.merge(parts, lses, lse_base, dtype=torch.float64)
    l = torch.where(torch.isnan(lses) | (lses == INF), torch.full_like(lses, -INF), lses)
    m = l.amax(dim=0)
    m = torch.where(m == -INF, torch.zeros_like(m), m)
    w = torch.exp2(l - m) if lse_base == 2 else torch.exp(l - m)
    total = w.sum(dim=0)
    weight = torch.where(total > 0, w / total, torch.zeros_like(w)).unsqueeze(-1)  # [cp, B, Hl, 1]
    finite = torch.isfinite(parts)
    size = torch.where(finite, parts.abs(), torch.zeros_like(parts))
    amax = size.amax(dim=-1, keepdim=True).float()
    scale = (amax / 448).double()  # in fp32, as the senders compute it
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    remote = (torch.arange(cp) != rank).double().view(cp, 1, 1, 1)
    live = weight > 0
    err = torch.where(live, weight * (2 ** -4 * size + 2 ** -10 * scale) * remote, torch.zeros_like(size)).sum(0)
    mag = torch.where(live, weight * size, torch.zeros_like(size)).sum(0)
    u = 2 ** -8 if out.dtype == torch.bfloat16 else 2 ** -11
    native = u * want.abs() + (2 * cp + 8) * 2 ** -24 * mag + 2 ** -25
    tol = u * (want.abs() + err) + (2 * cp + 8) * 2 ** -24 * (mag + err) + 2 ** -25 + err * (1 + 2 ** -20)
    got = out.cpu().double()
    off = (got - want).abs()
    bad = torch.where(torch.isfinite(want), ~(torch.isfinite(got) & (off <= tol)), torch.isfinite(got))
    narrowed = bool((torch.isfinite(want) & (off > native)).any())  # e4m3's rounding beyond out's own
    dev = out.device
    lse_bad = reference.count_mismatches(want.to(out.dtype).to(dev), out_lse, want.float().to(dev),
                                         want_lse.float().to(dev)).item()
    return int(bad.sum()) + (cp > 1 and not narrowed) + int(lse_bad)


def add_wire(suite, group):
    """fp8 on the wire (HEAD; bf16 and fp16) on three protocols, batches 1,
    37 and 150 (chunked by max_batch 64), the header's LSE corner cases
    included, partials x1000 (past e4m3's 448: a lost scale saturates):
    against the float64 merge within the format's bound, element by element
    (fp8_mismatches). Batch 37 passes NaN-poisoned strided out and out_lse;
    1 and 150 take the ones the call allocates (held). Bitwise agreement
    with the CPU model is gpu_fp8_wire's."""
    hl, d, base = 4, 128, 2
    for dtype in (torch.bfloat16, torch.float16):
        for protocol in ("LL128", "SIMPLE", "AUTO"):
            state = {}

            def create(dtype=dtype, protocol=protocol, state=state):
                state["ctx"] = nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype=dtype, lse_base=base,
                                                max_batch=64, protocol=protocol, wire="fp8")
                return 0

            tag = f"wire/fp8/{str(dtype).split('.')[-1]}/{protocol}"
            suite.case(f"{tag}/create", create)
            for batch in (1, 37, 150):
                def call(dtype=dtype, batch=batch, state=state):
                    x = Inputs("transposed", batch, suite.cp, hl, d, dtype, seed=suite.seed(), rank=suite.rank)
                    x.po.mul_(1000)
                    if batch == 37:
                        out, out_lse = strided_outputs(batch, hl, d, dtype)
                        state["ctx"](x.po, x.pl, out=out, out_lse=out_lse)
                    else:
                        out, out_lse = held(*state["ctx"](x.po, x.pl, return_lse=True))
                    return fp8_mismatches(x, out, out_lse, base, group, suite.cp, suite.rank)

                suite.case(f"{tag}/B{batch}", call)
            suite.case(f"{tag}/close", lambda state=state: state.pop("ctx").close() or 0)


def add_mode_graphs(suite, group):
    """CUDA graphs: TOKEN with device counts and empty shards whose values
    change between replays of one capture (no recapture; the rows past this
    rank's share keep their NaN), NONE with bf16 LSEs; then device counts
    that do not sum to B poison the context."""
    hl, d, base, dtype, cp = 4, 128, 2, torch.bfloat16, suite.cp

    def capture(ctx, x, out, lse, **extra):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            ctx(x.po, x.pl, out=out, out_lse=lse, **extra)  # warm-up
        side.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            ctx(x.po, x.pl, out=out, out_lse=lse, **extra)
        return graph

    def past_share(out, lse, n, replay):
        """Entries of the rows past this rank's n (poisoned before the replay) that are not NaN."""
        written = not_nan(out[n:], lse[n:])
        if written:
            print(f"[rank {suite.rank}] replay {replay}: {written} entries past row {n} written", flush=True)
        return written

    def token_device_counts():
        bad, batch = 0, 100
        with nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype=dtype, lse_base=base, max_batch=64,
                              scatter="token", lse_dtype=torch.bfloat16) as ctx:
            x = Inputs("transposed", batch, cp, hl, d, dtype, seed=suite.seed(), rank=suite.rank,
                       lse_dtype=torch.bfloat16)
            counts = torch.tensor(token_counts(batch, cp, "even"), dtype=torch.int32, device=DEVICE)
            sl, qsl = empty_shards(batch, suite.rank)
            out = nan_full((batch, cp * hl, d), dtype)  # room for any split
            lse = nan_full((batch, cp * hl))
            graph = capture(ctx, x, out, lse, row_counts=counts, seq_lens=sl, query_start_loc=qsl)
            for i, kind in enumerate(("uneven", "first", "last", "even", "uneven")):
                split = token_counts(batch, cp, kind) if i != 4 else token_counts(batch, cp, kind)[::-1]
                counts.copy_(torch.tensor(split, dtype=torch.int32))
                new_sl, new_qsl = empty_shards(batch, (suite.rank + i) % 3)  # other sequences empty this time
                sl.copy_(new_sl)
                qsl.copy_(new_qsl)
                x.refill(suite.seed(), suite.rank)
                x.plant_empty(sl, qsl)
                poison(out, lse)
                graph.replay()
                torch.cuda.synchronize()
                n = split[suite.rank]
                want, want_lse = x.reference(base, group, "token", split, sl, qsl)
                bad += reference.count_mismatches(out[:n], lse[:n], want, want_lse).item()
                bad += past_share(out, lse, n, i)
            ctx.check()
            del graph
        return bad

    def none_bf16_lse():
        bad, batch = 0, 48
        with nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype=dtype, lse_base=base, max_batch=32,
                              scatter="none", lse_dtype=torch.bfloat16) as ctx:
            x = Inputs("packed", batch, cp, hl, d, dtype, seed=suite.seed(), rank=suite.rank,
                       lse_dtype=torch.bfloat16)
            out, lse = mode_outputs("none", batch, hl, d, dtype, cp)
            graph = capture(ctx, x, out, lse)
            for i in range(3):
                x.refill(suite.seed(), suite.rank)
                poison(out, lse)
                graph.replay()
                torch.cuda.synchronize()
                want, want_lse = x.reference(base, group, "none")
                bad += reference.count_mismatches(out, lse, want, want_lse).item()
            ctx.check()
            del graph
        return bad

    def bad_device_counts():
        """Counts that do not sum to B, in a fresh context's first call: the
        kernels refuse them, the context is poisoned (ncclInvalidArgument),
        and nothing is written (a refused call writes NaN over the rows of
        the last split the kernels accepted, and there is none yet: the
        header's rowCountsDevice): out and out_lse keep their finite fill."""
        batch, fill = 8, 7.25  # exact in bf16: neither NaN nor a merge's zero
        ctx = nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype=dtype, lse_base=base, scatter="token")
        try:
            x = Inputs("packed", batch, cp, hl, d, dtype, seed=suite.seed(), rank=suite.rank)
            counts = torch.tensor([batch + 1] + [0] * (cp - 1), dtype=torch.int32, device=DEVICE)
            out = held(torch.full((batch + 1, cp * hl, d), fill, dtype=dtype, device=DEVICE))
            lse = held(torch.full((batch + 1, cp * hl), fill, device=DEVICE))
            ctx(x.po, x.pl, out=out, out_lse=lse, row_counts=counts)
            torch.cuda.synchronize()
            bad = expect(nccl_dcp.NcclDcpError, "ncclInvalidArgument", ctx.check)
            written = int((out != fill).sum().item() + (lse != fill).sum().item())
            if written:
                print(f"[rank {suite.rank}] the refused call wrote {written} entries", flush=True)
            bad += written
        finally:
            ctx.abort()
        return bad

    def device_counts_read_at_replay():
        """The device counts of a captured call are read when each replay
        runs, at every world size: the replays' counts differ (at world size
        1 every valid split is [B], so the last replay's counts are [B + 1],
        which the kernels must refuse -- a replay that used the counts of
        the capture would pass them); the outputs then stay NaN and the
        context is poisoned (ncclInvalidArgument)."""
        bad, batch = 0, 24
        ctx = nccl_dcp.Context(group, head_dim=d, local_heads=hl, dtype=dtype, lse_base=base, max_batch=16,
                               scatter="token")
        try:
            x = Inputs("packed", batch, cp, hl, d, dtype, seed=suite.seed(), rank=suite.rank)
            counts = torch.tensor(token_counts(batch, cp, "even"), dtype=torch.int32, device=DEVICE)
            out = nan_full((batch + 1, cp * hl, d), dtype)
            lse = nan_full((batch + 1, cp * hl))
            graph = capture(ctx, x, out, lse, row_counts=counts)
            splits = [token_counts(batch, cp, "first"), token_counts(batch, cp, "uneven")] if cp > 1 else []
            for i, split in enumerate(splits):
                counts.copy_(torch.tensor(split, dtype=torch.int32))
                x.refill(suite.seed(), suite.rank)
                poison(out, lse)
                graph.replay()
                torch.cuda.synchronize()
                n = split[suite.rank]
                want, want_lse = x.reference(base, group, "token", split)
                bad += reference.count_mismatches(out[:n], lse[:n], want, want_lse).item()
                bad += past_share(out, lse, n, i)
            counts.copy_(torch.tensor([batch + 1] + [0] * (cp - 1), dtype=torch.int32))
            poison(out, lse)
            graph.replay()
            torch.cuda.synchronize()
            bad += expect(nccl_dcp.NcclDcpError, "ncclInvalidArgument", ctx.check)
            bad += not_nan(out, lse)
            del graph
        finally:
            ctx.abort()
        return bad

    suite.case("modes/graph/token_device_counts_and_seq_lens", token_device_counts)
    suite.case("modes/graph/token_device_counts_read_at_replay", device_counts_read_at_replay)
    suite.case("modes/graph/none_bf16_lse", none_bf16_lse)
    suite.case("modes/poison/device_counts_not_summing_to_batch", bad_device_counts)


# ---- the engines' drop-ins (nccl_dcp.vllm, nccl_dcp.flashinfer, issue 35)

def lse_mismatches(lse, want_lse):
    """A merged LSE (float32, as vLLM returns it; or a low-precision dtype)
    against the float64 one: within the dtype's rounding, or both -inf."""
    eps = {torch.bfloat16: 1.0 / 128, torch.float16: 1.0 / 1024, torch.float32: 1e-5}[lse.dtype]
    got = lse.double()
    both_inf = torch.isinf(want_lse) & (got == want_lse)
    close = torch.isfinite(got) & ((got - want_lse).abs() <= eps * (1 + want_lse.abs()))
    return int((~(both_inf | close)).sum())


VLLM_DROPIN = ((torch.bfloat16, torch.float32), (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float32))
FLASHINFER_DROPIN = ((torch.bfloat16, 2), (torch.float16, "e"))
DROPIN_BATCHES = (1, 37, 150)  # 150 > the workspace's 64 rows: chunks


def add_dropins(suite, group):
    """vLLM's call ([B, H, D] + [B, H] -> [B, H/cp, D] and the merged LSE
    in float32 whatever the input's dtype, base e) and FlashInfer's ([B, heads, cp, D] +
    [B, heads, cp] fp32 -> [B, heads, D], base 2 or e), each against the
    float64 reference, with the header's corner cases; then the contexts
    they cached (one per configuration) and their close."""
    hl, d = 4, 128
    workspaces = {}
    for dtype, lse_dtype in VLLM_DROPIN:
        for batch in DROPIN_BATCHES:
            def call(dtype=dtype, lse_dtype=lse_dtype, batch=batch):
                x = Inputs("packed", batch, suite.cp, hl, d, dtype, seed=suite.seed(), rank=suite.rank,
                           lse_dtype=lse_dtype)
                if suite.cp == 1:  # as vLLM: one rank has nothing to exchange, its inputs come back
                    out, lse = vllm.dcp_a2a_lse_reduce(x.po, x.pl, group, return_lse=True)
                    return int(out is not x.po or lse is not x.pl)
                want, want_lse = x.reference("e", group)
                out = held(vllm.dcp_a2a_lse_reduce(x.po, x.pl, group))
                bad = reference.count_mismatches(out, None, want, None).item()
                # The same inputs again: the first answer is held, so this out cannot be handed its block.
                out, lse = held(*vllm.dcp_a2a_lse_reduce(x.po, x.pl, group, return_lse=True,
                                                         is_lse_base_on_e=True))
                if tuple(out.shape) != (batch, hl, d) or lse.dtype != torch.float32:  # as vLLM: fp32 always
                    raise AssertionError(f"out {tuple(out.shape)}, lse {lse.dtype}")
                return bad + reference.count_mismatches(out, None, want, None).item() + lse_mismatches(lse, want_lse)
            suite.case(f"dropin/vllm/{str(dtype).split('.')[-1]}/lse_{str(lse_dtype).split('.')[-1]}/B{batch}", call)
    for dtype, base in FLASHINFER_DROPIN:
        def create(dtype=dtype):
            workspaces[dtype] = flashinfer.decode_cp_a2a_lse_reduce_create_workspace(64, hl, suite.cp, d, dtype, group)
            return 0
        suite.case(f"dropin/flashinfer/{str(dtype).split('.')[-1]}/create_workspace", create)
        for batch in DROPIN_BATCHES:
            def call(dtype=dtype, base=base, batch=batch):
                # The attention kernel's [B, heads, cp, D] and [B, heads, cp]: Inputs' transposed storage.
                x = Inputs("transposed", batch, suite.cp, hl, d, dtype, seed=suite.seed(), rank=suite.rank)
                po, pl = x.po.transpose(1, 2), x.pl.transpose(1, 2)
                out = held(flashinfer.decode_cp_a2a_lse_reduce(po, pl, workspaces[dtype], suite.rank, suite.cp,
                                                               is_lse_base_on_e=base == "e"))
                if tuple(out.shape) != (batch, hl, d) or out.dtype != dtype:
                    raise AssertionError(f"out {tuple(out.shape)} {out.dtype}")
                want, _ = x.reference(base, group)
                return reference.count_mismatches(out, None, want, None).item()
            suite.case(f"dropin/flashinfer/{str(dtype).split('.')[-1]}/base{base}/B{batch}", call)

    def close():
        cached = len(vllm._contexts)
        vllm.close_contexts()
        for ws in workspaces.values():
            ws.close()
        if cached != (len(VLLM_DROPIN) if suite.cp > 1 else 0):
            raise AssertionError(f"vLLM's drop-in cached {cached} contexts for {len(VLLM_DROPIN)} configurations")
        return 0
    suite.case("dropin/close", close)


def add_dropin_graphs(suite, group):
    """FlashInfer's drop-in captured in a CUDA graph, as an engine captures
    a decode step (an eager warm-up first; and without one, its first call
    captured: the workspace made the context), replayed with fresh inputs. (vLLM's runs the same context; on one rank it passes
    its inputs through, so FlashInfer's is the one that runs everywhere.)"""
    hl, d = 4, 128

    def run():
        bad = 0
        ws = flashinfer.decode_cp_a2a_lse_reduce_create_workspace(64, hl, suite.cp, d, torch.bfloat16, group)
        x = Inputs("transposed", 24, suite.cp, hl, d, torch.bfloat16, seed=suite.seed(), rank=suite.rank)
        po, pl = x.po.transpose(1, 2), x.pl.transpose(1, 2)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            flashinfer.decode_cp_a2a_lse_reduce(po, pl, ws, suite.rank, suite.cp)  # warm-up: makes the context
        side.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            out = flashinfer.decode_cp_a2a_lse_reduce(po, pl, ws, suite.rank, suite.cp)
        for i in range(3):
            x.refill(suite.seed(), suite.rank)
            poison(out)
            graph.replay()
            torch.cuda.synchronize()
            want, _ = x.reference(2, group)
            bad += reference.count_mismatches(out, None, want, None).item()
        del graph
        ws.close()
        return bad
    suite.case("dropin/flashinfer/graph_replays", run)

    def first_call_captured():
        # As FlashInfer allows: workspace, then capture, no eager call first
        # (the workspace's creation made its context).
        ws = flashinfer.decode_cp_a2a_lse_reduce_create_workspace(64, hl, suite.cp, d, torch.bfloat16, group)
        x = Inputs("transposed", 8, suite.cp, hl, d, torch.bfloat16, seed=suite.seed(), rank=suite.rank)
        po, pl = x.po.transpose(1, 2), x.pl.transpose(1, 2)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            out = flashinfer.decode_cp_a2a_lse_reduce(po, pl, ws, suite.rank, suite.cp)
        poison(out)
        graph.replay()
        torch.cuda.synchronize()
        want, _ = x.reference(2, group)
        bad = reference.count_mismatches(out, None, want, None).item()
        del graph
        ws.close()
        return bad
    suite.case("dropin/flashinfer/first_call_captured", first_call_captured)


# ---- main

def add_all(suite, group):
    """Every case of the suite, in order (test_gpu_suite_dry.py counts them
    against test/expected_cases.txt's python_torchrun)."""
    add_api(suite, group)
    add_matrix(suite, group)
    add_mla_shape(suite, group)
    add_protocols(suite, group)
    add_graphs(suite, group)
    add_streams(suite, group)
    add_compile(suite, group)
    add_modes(suite, group)
    add_mode_graphs(suite, group)
    add_wire(suite, group)
    add_dropins(suite, group)
    add_dropin_graphs(suite, group)
    add_failures(suite, group)  # last: it leaves aborted contexts behind


def write_junit(path, results, replay_note=None):
    """replay_note(index): a failed case's seed (Suite.replay_note), added to its message."""
    suite = et.Element("testsuite", name="python_gpu", tests=str(len(results)),
                       failures=str(sum(1 for r in results if r[1])), skipped=str(sum(1 for r in results if r[4])))
    for index, (name, bad, detail, seconds, skipped) in enumerate(results):
        case = et.SubElement(suite, "testcase", classname="python_gpu", name=name, time=f"{seconds:.3f}")
        if bad:
            note = f" ({replay_note(index)})" if replay_note else ""
            et.SubElement(case, "failure", message=(detail or f"{bad} wrong") + note)
        elif skipped:
            et.SubElement(case, "skipped", message=detail)
    root = et.Element("testsuites")
    root.append(suite)
    et.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junit", help="write the results as JUnit XML (rank 0)")
    parser.add_argument("--seed", type=int, help="the base seed (>= 0) of a run to replay (default: a random one, "
                        "printed at the start)")
    args = parser.parse_args()
    if args.seed is not None and args.seed < 0:
        parser.error("--seed must be >= 0")

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank), timeout=timedelta(seconds=120))
    group = dist.group.WORLD
    suite = Suite(group, seed=args.seed)
    if suite.rank == 0:
        lib = nccl_dcp.library()
        print(f"nccl_dcp on {suite.cp} rank(s): {lib.path} (version {lib.version}), NCCL "
              f"{'.'.join(map(str, lib.nccl_version))}, torch {torch.__version__} (NCCL "
              f"{'.'.join(map(str, torch.cuda.nccl.version()))})", flush=True)
    add_all(suite, group)
    results = suite.run()
    failed = sum(1 for r in results if r[1])
    skipped = sum(1 for r in results if r[4] and not r[1])
    if suite.rank == 0:
        if args.junit:
            write_junit(args.junit, results, suite.replay_note)
        print(f"{len(results) - failed - skipped} passed, {failed} failed, {skipped} skipped", flush=True)
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
