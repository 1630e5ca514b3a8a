"""With torch but without a GPU: real torch tensors through the call checks,
the PyTorch reference merge (nccl_dcp.reference) on hand-computed cases,
and Context.__call__ refusing bad tensors before the library is called."""

import math

import pytest

from fake_tensor import FakeDevice
from nccl_dcp._validate import CallSpec, _check_device, check_call

torch = pytest.importorskip("torch", reason="torch is not installed")
from nccl_dcp import reference  # noqa: E402  (needs torch)

CP, HL, D, B = 2, 4, 64, 3
SPEC = CallSpec(cp=CP, local_heads=HL, head_dim=D, dtype="bfloat16", device=0)


class OnGpu0:
    """A CPU tensor presented as living on cuda:0: torch's own shape,
    stride(), dtype and data_ptr() go through the checks."""

    device = FakeDevice("cuda", 0)
    is_cuda = True

    def __init__(self, t):
        self.t = t
        self.shape, self.dtype = t.shape, t.dtype

    def stride(self):
        return self.t.stride()

    def data_ptr(self):
        return self.t.data_ptr()

    def get_device(self):
        return 0

    def is_contiguous(self):
        return self.t.is_contiguous()


def tensors(po=None, pl=None, out=None, out_lse=None):
    po = po if po is not None else torch.zeros(B, CP * HL, D, dtype=torch.bfloat16)
    pl = pl if pl is not None else torch.zeros(B, CP * HL)
    out = out if out is not None else torch.zeros(B, HL, D, dtype=torch.bfloat16)
    out_lse = out_lse if out_lse is not None else torch.zeros(B, HL)
    return [OnGpu0(t) for t in (po, pl, out, out_lse)]


# ---- torch tensors through the checks

def test_transposed_torch_view_passes_its_strides():
    po = torch.zeros(B, HL, CP, D, dtype=torch.bfloat16).transpose(1, 2)
    pl = torch.zeros(B, HL, CP).transpose(1, 2)
    s = check_call(SPEC, *tensors(po, pl)).strides
    assert (s["inRow"], s["inPeer"], s["inHead"]) == (HL * CP * D, D, CP * D)
    assert (s["lseRow"], s["lsePeer"], s["lseHead"]) == (HL * CP, 1, CP)


def test_sliced_torch_views():
    po = torch.zeros(B, CP * HL, D + 8, dtype=torch.bfloat16)[..., :D]
    out = torch.zeros(B + 2, HL, D, dtype=torch.bfloat16)[1:B + 1]  # offset by a whole row: still aligned
    s = check_call(SPEC, *tensors(po=po, out=out)).strides
    assert (s["inHead"], s["outRow"]) == (D + 8, HL * D)


def test_torch_cpu_tensor_is_refused():
    t = tensors()
    t[0] = torch.zeros(B, CP * HL, D, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^partial_out is on cpu, but the context's communicator is on cuda:0"):
        check_call(SPEC, *t)


def test_torch_dtype_and_broadcast_and_alignment_are_refused():
    with pytest.raises(ValueError, match=r"^out has dtype float16, expected bfloat16"):
        check_call(SPEC, *tensors(out=torch.zeros(B, HL, D, dtype=torch.float16)))
    with pytest.raises(ValueError, match=r"^partial_lse has stride 0 in dim 0"):
        check_call(SPEC, *tensors(pl=torch.zeros(1, CP * HL).expand(B, CP * HL)))
    flat = torch.zeros(B * CP * HL * D + 1, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^partial_out.data_ptr\(\) .* is not 16-byte aligned"):
        check_call(SPEC, *tensors(po=flat[1:].view(B, CP * HL, D)))


# ---- the reference merge, by hand

def merge1(lses, parts, base):
    """One (row, head) of D = 1 from per-source lists."""
    out, lse = reference.merge(torch.tensor(parts, dtype=torch.float32).view(-1, 1, 1, 1),
                               torch.tensor(lses, dtype=torch.float32).view(-1, 1, 1), base)
    return out.item(), lse.item()


def test_merge_base_e():
    out, lse = merge1([math.log(1.0), math.log(3.0)], [4.0, 8.0], "e")
    assert out == pytest.approx(0.25 * 4 + 0.75 * 8)
    assert lse == pytest.approx(math.log(4.0))


def test_merge_base_2():
    out, lse = merge1([1.0, 3.0], [10.0, 20.0], 2)
    assert out == pytest.approx(0.2 * 10 + 0.8 * 20)
    assert lse == pytest.approx(3.0 + math.log2(1.25))


def test_merge_skips_empty_sources_and_their_nan_payload():
    inf, nan = float("inf"), float("nan")
    assert merge1([-inf, 0.5], [nan, 7.0], 2) == pytest.approx((7.0, 0.5))
    assert merge1([nan, 0.5, inf], [nan, 7.0, nan], "e") == pytest.approx((7.0, 0.5))


def test_merge_of_nothing():
    inf, nan = float("inf"), float("nan")
    out, lse = merge1([-inf, nan, inf], [nan, nan, nan], 2)
    assert out == 0.0 and lse == -inf


def test_merge_is_stable_for_large_lse():
    assert merge1([1000.0, 1000.0], [2.0, 4.0], "e") == pytest.approx((3.0, 1000.0 + math.log(2.0)))


def test_count_mismatches():
    want = torch.randn(4, HL, D)
    want_lse = torch.randn(4, HL)
    want_lse[0, 0] = float("-inf")
    got = want.to(torch.bfloat16)
    assert reference.count_mismatches(got, want_lse.clone(), want, want_lse).item() == 0
    got[1, 2, 3] += 1.0
    bad_lse = want_lse.clone()
    bad_lse[0, 0] = 0.0
    bad_lse[2, 1] = float("nan")
    assert reference.count_mismatches(got, bad_lse, want, want_lse).item() == 3
    got[1, 2, 3] = float("nan")
    assert reference.count_mismatches(got, None, want, None).item() == 1


# ---- Context.__call__ on CPU: the fast path, against a library stand-in
#
# CpuLibrary stands in for libnccl_dcp.so on one rank (cp = 1): its
# ncclDcpA2aLseReduceEx reads the tensors back from the raw pointers and the
# ncclDcpStrides_t it is given, and writes the merge (nccl_dcp.reference)
# through the out pointers. With cp = 1 every scatter mode's output is the
# single source's partials (TOKEN: every row is rank 0's), with the rows of
# seq_lens / query_start_loc empty. So the pointers, strides and batch that the
# Python side passes are checked end to end, on CPU tensors.

HL1, D1 = 4, 32
SPEC1 = CallSpec(cp=1, local_heads=HL1, head_dim=D1, dtype="bfloat16", device=0)
DTYPE_OF = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def strided_view(ptr, dtype, sizes, strides):
    import ctypes
    if 0 in sizes:
        return torch.empty(sizes, dtype=dtype)
    extent = 1 + sum((n - 1) * st for n, st in zip(sizes, strides))
    buf = (ctypes.c_char * (extent * torch.tensor([], dtype=dtype).element_size())).from_address(ptr)
    return torch.frombuffer(buf, dtype=dtype).as_strided(sizes, strides)


class CpuLibrary:
    def __init__(self, spec, lse_base=2, result=0):
        import ctypes
        from nccl_dcp import _abi
        self.spec, self.base, self.result = spec, lse_base, result
        self.calls = []
        self.cdll = self
        # A C function pointer, as the library's: the launchers call it by address.
        restype, argtypes = _abi.FUNCTIONS["ncclDcpA2aLseReduceEx"]
        self.ncclDcpA2aLseReduceEx = ctypes.CFUNCTYPE(restype, *argtypes)(self.reduce)

    def reduce(self, handle, po, pl, out, out_lse, batch, strides, args, stream):
        a = args.contents if args else None
        extras = None
        if a is not None:
            import ctypes
            assert (a.magic, a.size) == (0xDC9CA115, ctypes.sizeof(a))
            counts = list(ctypes.cast(a.rowCounts, ctypes.POINTER(ctypes.c_int))[:1]) if a.rowCounts else None
            extras = {"rowCounts": counts, "rowCountsDevice": a.rowCountsDevice, "seqLens": a.seqLens,
                      "queryStartLoc": a.queryStartLoc, "numSeqs": a.numSeqs}
        # A copy of the strides: the C helper passes a struct on its stack,
        # gone (garbage on newer torch builds) once the call returns.
        strides_copy = type(strides.contents).from_buffer_copy(strides.contents)
        self.calls.append((handle, po, pl, out, out_lse, batch, strides_copy, stream, extras))
        if self.result:
            return self.result
        st, hl, d = strides.contents, self.spec.local_heads, self.spec.head_dim
        dt, lse_dt = DTYPE_OF[self.spec.dtype], DTYPE_OF[self.spec.lse_dtype]
        s = lambda v, packed: v or packed  # noqa: E731 -- 0 = packed
        x = strided_view(po, dt, (batch, 1, hl, d), (s(st.inRow, hl * d), s(st.inPeer, hl * d), s(st.inHead, d), 1))
        lse = strided_view(pl, lse_dt, (batch, 1, hl), (s(st.lseRow, hl), s(st.lsePeer, hl), s(st.lseHead, 1)))
        lse = lse.float()
        if a is not None and a.numSeqs:  # CPU tensors here: the pointers are host memory
            sl = strided_view(a.seqLens, torch.int32, (a.numSeqs,), (1,))
            qsl = strided_view(a.queryStartLoc, torch.int32, (a.numSeqs + 1,), (1,))
            empty = reference.empty_rows(batch, sl, qsl)
            lse = torch.where(empty.view(batch, 1, 1), torch.full_like(lse, float("-inf")), lse)
        merged, merged_lse = reference.merge(x.transpose(0, 1), lse.transpose(0, 1), self.base)
        strided_view(out, dt, (batch, hl, d), (s(st.outRow, hl * d), s(st.outHead, d), 1)).copy_(merged)
        if out_lse is not None:
            strided_view(out_lse, torch.float32, (batch, hl), (s(st.outLseRow, hl), s(st.outLseHead, 1))).copy_(
                merged_lse)
        return 0

    def ncclDcpContextDestroy(self, handle):
        self.calls.append(("destroy", handle))
        return 0

    def ncclDcpContextAbort(self, handle):
        self.calls.append(("abort", handle))
        return 0

    def check(self, result, what):
        from nccl_dcp import NcclDcpError
        if result:
            raise NcclDcpError(result, f"{what} failed: ncclRemoteError: poisoned")


@pytest.fixture(params=["native", "ctypes"])
def launcher(request, monkeypatch):
    """Both eager hot paths: _fastcall.Launcher (built here when the package
    has none; skipped without a C compiler) and PyLauncher."""
    if request.param == "native":
        from nccl_dcp import context
        monkeypatch.setattr(context, "_fastcall", request.getfixturevalue("fastcall"))
    return request.param


@pytest.fixture
def cpu_context(monkeypatch, launcher):
    """A Context over CpuLibrary whose tensors live on the CPU."""
    from nccl_dcp import Context, _validate
    monkeypatch.setattr(_validate, "_check_device", lambda name, t, spec: None)
    monkeypatch.setattr(_validate, "_check_array_device", lambda name, t, spec: None)
    made = []

    def make(spec=SPEC1, **kwargs):
        ctx = object.__new__(Context)
        ctx._lib, ctx._group, ctx._comm, ctx.spec = CpuLibrary(spec, **kwargs), None, 0, spec
        ctx.rank, ctx.n_ranks, ctx.timeout_ms = 0, spec.cp, None
        ctx._adopt(0xC0)
        ctx._start_launcher(torch.device("cpu"), lambda device: 0x5, native=launcher == "native")
        made.append(ctx)
        return ctx
    yield make
    for ctx in made:
        ctx._detach()


def random_inputs(batch, layout="packed", dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    if layout == "packed":
        po = torch.randn(batch, HL1, D1, generator=g).to(dtype)
        pl = torch.randn(batch, HL1, generator=g)
    else:  # [B, Hl, cp, D] seen as [B, cp, Hl, D], and padded LSE rows
        po = torch.randn(batch, HL1, 1, D1, generator=g).to(dtype).transpose(1, 2)
        pl = torch.randn(batch, HL1 + 3, generator=g)[:, :HL1]
    pl[0, 0] = float("-inf")
    return po, pl


def expected(po, pl, base=2):
    out, lse = reference.merge(po.reshape(1, po.shape[0], HL1, D1), pl.reshape(1, pl.shape[0], HL1), base)
    return out.to(po.dtype), lse


def test_call_merges_through_pointers_and_strides(cpu_context):
    ctx = cpu_context()
    for layout in ("packed", "transposed"):
        po, pl = random_inputs(5, layout)
        out, out_lse = ctx(po, pl, return_lse=True)
        want, want_lse = expected(po, pl)
        assert out.shape == (5, HL1, D1) and out.dtype == torch.bfloat16 and out_lse.dtype == torch.float32
        assert torch.equal(out, want) and torch.equal(out_lse, want_lse)
    out = torch.full((5, HL1, D1 + 8), float("nan"), dtype=torch.bfloat16)[..., :D1]  # strided out
    assert ctx(po, pl, out=out) is out
    assert torch.equal(out, expected(po, pl)[0])


def test_call_checks_each_layout_once(cpu_context, monkeypatch):
    from nccl_dcp import context
    checks = []
    real = context.check_call
    monkeypatch.setattr(context, "check_call", lambda *a: checks.append(1) or real(*a))
    ctx = cpu_context()
    po, pl = random_inputs(3)
    out = torch.empty(3, HL1, D1, dtype=torch.bfloat16)
    for _ in range(3):
        ctx(po, pl, out=out)
    assert len(checks) == 1 and ctx._launcher.layouts() == 1
    ctx(po, pl)                      # another layout: out_lse None but out allocated: same key as above
    ctx(po, pl, return_lse=True)     # out_lse given: a new key
    po2, pl2 = random_inputs(4)      # another batch: a new key
    ctx(po2, pl2)
    assert len(checks) == 3
    # A cached layout at a misaligned address is still refused.
    flat = torch.zeros(3 * HL1 * D1 + 1, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^partial_out.data_ptr\(\) .* is not 16-byte aligned"):
        ctx(flat[1:].view(3, 1, HL1, D1).view(3, HL1, D1), pl, out=out)
    with pytest.raises(ValueError, match=r"^out has dtype float32"):
        ctx(po, pl, out=torch.zeros(3, HL1, D1))


# ---- the layout cache: what a cached layout must never let through

@pytest.fixture
def checks(monkeypatch):
    """The check_call calls of Context's slow path, counted."""
    from nccl_dcp import context
    made = []
    real = context.check_call
    monkeypatch.setattr(context, "check_call", lambda *a: made.append(1) or real(*a))
    return made


def test_cache_refuses_another_dtype_on_a_cached_shape(cpu_context, checks):
    ctx = cpu_context()
    po, pl = random_inputs(3)
    out, out_lse = torch.empty(3, HL1, D1, dtype=torch.bfloat16), torch.empty(3, HL1)
    ctx(po, pl, out, out_lse)
    ctx(po, pl, out, out_lse)
    assert len(checks) == 1
    bad = {"partial_out": (po.half(), pl, out, out_lse), "partial_lse": (po, pl.double(), out, out_lse),
           "out": (po, pl, out.half(), out_lse), "out_lse": (po, pl, out, out_lse.half())}
    for name, args in bad.items():
        with pytest.raises(ValueError, match=rf"^{name} has dtype float(16|64), expected"):
            ctx(*args)
    assert len(ctx._lib.calls) == 2 and len(checks) == 1 + len(bad)


def test_cache_refuses_another_device_on_a_cached_layout(cpu_context, launcher, monkeypatch):
    """Tensors that pass for cuda:0 are cached; the same layout on the CPU is refused."""
    from nccl_dcp import _validate
    ctx = cpu_context()
    monkeypatch.setattr(_validate, "_check_device", _check_device)
    ctx._start_launcher(torch.device("cuda", 0), lambda device: 0x5, native=launcher == "native")
    po, pl = random_inputs(3)
    out = torch.empty(3, HL1, D1, dtype=torch.bfloat16)
    on_gpu = [OnGpu0(t) for t in (po, pl, out)]
    ctx(*on_gpu)
    ctx(*on_gpu)
    assert ctx._launcher.layouts() == 1 and len(ctx._lib.calls) == 2
    for i, name in enumerate(("partial_out", "partial_lse", "out")):
        args = list(on_gpu)
        args[i] = (po, pl, out)[i]
        with pytest.raises(ValueError, match=rf"^{name} is on cpu, but the context's communicator is on cuda:0"):
            ctx(*args)
    assert len(ctx._lib.calls) == 2


def test_cache_rechecks_a_layout_change(cpu_context, checks):
    """Same shapes, other strides: checked again, and refused when they break a rule."""
    ctx = cpu_context()
    po, pl = random_inputs(3)
    out = torch.empty(3, HL1, D1, dtype=torch.bfloat16)
    ctx(po, pl, out=out)
    wide = torch.zeros(3, HL1, D1 + 8, dtype=torch.bfloat16)[..., :D1]  # 16-byte rows: allowed
    wide.copy_(po)
    ctx(wide, pl, out=out)
    assert len(checks) == 2 and ctx._lib.calls[-1][6].inHead == D1 + 8 and torch.equal(out, expected(po, pl)[0])
    odd = torch.zeros(3, HL1, D1 + 1, dtype=torch.bfloat16)[..., :D1]   # 66-byte rows
    with pytest.raises(ValueError, match=r"^partial_out has stride 132 elements \(264 bytes\) in dim 0: every "
                                         r"stride of partial_out must be a multiple of 16 bytes"):
        ctx(odd, pl, out=out)
    with pytest.raises(ValueError, match=r"^partial_lse has stride 0 in dim 0"):
        ctx(po, pl[:1].expand(3, HL1), out=out)
    with pytest.raises(ValueError, match=r"^out must be contiguous in its last dimension"):
        ctx(po, pl, out=torch.empty(3, D1, HL1, dtype=torch.bfloat16).transpose(1, 2))
    assert len(ctx._lib.calls) == 2


def test_cache_rechecks_strides_of_an_empty_batch(cpu_context, checks):
    """0 rows: contiguous whatever its strides (torch), so the strides are the key."""
    ctx = cpu_context()
    empty = torch.empty(0, HL1, D1, dtype=torch.bfloat16)
    pl = torch.empty(0, HL1)
    ctx(empty, pl)
    ctx(empty, pl)
    assert len(checks) == 1
    odd = torch.empty_strided((0, HL1, D1), (HL1 * (D1 + 1), D1 + 1, 1), dtype=torch.bfloat16)
    assert odd.is_contiguous()
    with pytest.raises(ValueError, match=r"^partial_out has stride 33 elements"):
        ctx(odd, pl)


def test_cache_contiguous_size_one_strides_share_a_layout(cpu_context, launcher, checks):
    """A dimension of size 1 may have any stride in a contiguous tensor: it
    is never used, so the native launcher keys contiguous tensors on their
    sizes alone (PyLauncher on their strides: checked again)."""
    ctx = cpu_context()
    po, pl = random_inputs(1)
    ctx(po, pl)
    odd = po.as_strided(po.shape, (12345, D1, 1))
    assert odd.is_contiguous() and odd.stride() != po.stride()
    out = ctx(odd, pl)
    assert len(checks) == (1 if launcher == "native" else 2) and torch.equal(out, expected(po, pl)[0])
    assert ctx._lib.calls[0][6].inRow == ctx._lib.calls[1][6].inRow == 0


def test_cache_holds_many_layouts(cpu_context, checks):
    ctx = cpu_context()
    inputs = [random_inputs(b, seed=b) for b in range(1, 301)]
    for po, pl in inputs:
        ctx(po, pl)
    assert len(checks) == 300 and ctx._launcher.layouts() == 300 - 256
    for po, pl in inputs[-40:]:
        assert torch.equal(ctx(po, pl), expected(po, pl)[0])
    assert len(checks) == 300


def test_cache_takes_tensor_subclasses(cpu_context, checks):
    class Sub(torch.Tensor):
        pass

    ctx = cpu_context()
    po, pl = random_inputs(3, "transposed")
    out = torch.empty(3, HL1, D1, dtype=torch.bfloat16).as_subclass(Sub)
    for _ in range(2):
        ctx(po.as_subclass(Sub), pl.as_subclass(Sub), out=out)
    assert len(checks) == 1 and torch.equal(out.as_subclass(torch.Tensor), expected(po, pl)[0])
    for _ in range(2):
        made = ctx(po.as_subclass(Sub), pl)
        assert type(made) is Sub and torch.equal(made.as_subclass(torch.Tensor), expected(po, pl)[0])
    assert len(checks) == 1  # the same layout


def test_cache_allocates_a_new_out_per_call(cpu_context, checks):
    """out=None: made per call (by the C launcher on a cached layout), never reused."""
    ctx = cpu_context()
    for batch in (3, 0):
        po, pl = random_inputs(batch) if batch else (torch.empty(0, HL1, D1, dtype=torch.bfloat16),
                                                     torch.empty(0, HL1))
        outs = [ctx(po, pl) for _ in range(3)]
        assert len({o.data_ptr() for o in outs if batch}) == (3 if batch else 0)
        for o in outs:
            assert o.shape == (batch, HL1, D1) and o.dtype == torch.bfloat16 and o.is_contiguous()
            assert torch.equal(o, expected(po, pl)[0])
    assert len(checks) == 2 and len(ctx._lib.calls) == 6
    out, out_lse = ctx(po, pl, return_lse=True)  # out_lse made in Python, out in the launcher
    assert out.shape == (0, HL1, D1) and out_lse.shape == (0, HL1)


def test_native_launcher_reads_torch_tensors_directly(fastcall):
    from nccl_dcp.context import Context  # noqa: F401 -- a Launcher resolves the accessors at creation
    fastcall.Launcher(1, 1, lambda d: 0, 0, torch.device("cpu"), torch.bfloat16, torch.float32, HL1, D1)
    assert sorted(fastcall.direct()) == sorted(["dtype", "is_cuda", "get_device", "shape", "is_contiguous",
                                                "stride", "data_ptr", "new_empty"]), "torch.Tensor's accessors changed"


def test_call_takes_any_stream_and_passes_it(cpu_context):
    ctx = cpu_context()
    po, pl = random_inputs(2)
    ctx(po, pl)
    ctx(po, pl, stream=0x77)
    ctx(po, pl, stream=0x5)
    assert [c[7] for c in ctx._lib.calls] == [0x5, 0x77, 0x5]
    with pytest.raises(ValueError, match=r"^stream must be a torch.cuda.Stream or a cudaStream_t int"):
        ctx(po, pl, stream=-1)


def test_call_takes_a_stream_object_on_the_cached_layout(cpu_context, checks):
    from types import SimpleNamespace
    ctx = cpu_context()
    po, pl = random_inputs(2)
    stream = SimpleNamespace(cuda_stream=0x99, device=torch.device("cuda", 0))
    ctx(po, pl, stream=stream)
    ctx(po, pl, stream=stream)
    assert [c[7] for c in ctx._lib.calls] == [0x99, 0x99] and len(checks) == 1
    with pytest.raises(ValueError, match=r"^stream is on cuda:1, but the context's communicator is on cuda:0"):
        ctx(po, pl, stream=SimpleNamespace(cuda_stream=0x99, device=torch.device("cuda", 1)))


def test_call_raises_the_library_error(cpu_context):
    from nccl_dcp import NcclDcpError
    ctx = cpu_context(result=_abi_remote_error())
    po, pl = random_inputs(2)
    for _ in range(2):  # the layout's first call (checked), then a cached one: each calls the library once
        with pytest.raises(NcclDcpError, match="poisoned") as e:
            ctx(po, pl)
        assert e.value.result == _abi_remote_error()
    assert len(ctx._lib.calls) == 2


def _abi_remote_error():
    from nccl_dcp import _abi
    return _abi.NCCL_REMOTE_ERROR


def test_closed_context_refuses_calls(cpu_context):
    ctx = cpu_context()
    po, pl = random_inputs(2)
    op_id = ctx.op_id
    ctx._detach()
    with pytest.raises(ValueError, match=r"^the context is closed"):
        ctx(po, pl)
    with pytest.raises(ValueError, match=rf"^ctx_id {op_id} names no open nccl_dcp.Context"):
        torch.ops.nccl_dcp.a2a_lse_reduce(op_id, po, pl)
    assert ctx._lib.calls == []


def test_not_a_tensor_is_named(cpu_context):
    ctx = cpu_context()
    with pytest.raises(ValueError, match=r"^partial_out must be a tensor, got list"):
        ctx([1.0], torch.zeros(1, HL1))
    po, pl = random_inputs(2)
    ctx(po, pl)  # a cached layout
    for out in (-1, 0, 6, -1000, None.__class__):  # ints that the launchers return, too
        with pytest.raises(ValueError, match=r"^out must be a tensor, got"):
            ctx(po, pl, out=out)
    assert len(ctx._lib.calls) == 1


# ---- torch.library ops and torch.compile

def test_ops_fake_implementation_on_meta(cpu_context):
    ctx = cpu_context()
    po = torch.empty(7, 1, HL1, D1, dtype=torch.bfloat16, device="meta")
    pl = torch.empty(7, HL1, device="meta")
    out, lse = torch.ops.nccl_dcp.a2a_lse_reduce(ctx.op_id, po, pl)
    assert (out.shape, out.dtype, out.device.type) == ((7, HL1, D1), torch.bfloat16, "meta")
    assert (lse.shape, lse.dtype) == ((7, HL1), torch.float32)
    assert ctx._lib.calls == []


def test_ops_pass_opcheck(cpu_context):
    ctx = cpu_context()
    po, pl = random_inputs(3)
    torch.library.opcheck(torch.ops.nccl_dcp.a2a_lse_reduce, (ctx.op_id, po, pl))
    out, out_lse = torch.empty(3, HL1, D1, dtype=torch.bfloat16), torch.empty(3, HL1)
    torch.library.opcheck(torch.ops.nccl_dcp.a2a_lse_reduce_out, (ctx.op_id, po, pl, out, out_lse))
    torch.library.opcheck(torch.ops.nccl_dcp.a2a_lse_reduce_out, (ctx.op_id, po, pl, out, None))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_gives_the_eager_result(cpu_context, backend):
    ctx = cpu_context()
    torch._dynamo.reset()
    torch._inductor.config.compile_threads = 1  # no pool of compile workers left behind on a 2-core CI machine

    def step(po, pl, out):
        merged, lse = ctx(po, pl, return_lse=True)    # functional op
        ctx(po, pl, out=out)                           # in-place op, no out_lse
        return merged.float() * 2 + 1, lse - 1

    compiled = torch.compile(step, fullgraph=True, backend=backend)
    for seed in range(2):
        po, pl = random_inputs(6, "transposed", seed=seed)
        want_out = torch.full((6, HL1, D1), float("nan"), dtype=torch.bfloat16)
        got_out = want_out.clone()
        want = step(po, pl, want_out)
        got = compiled(po, pl, got_out)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert torch.equal(got_out, want_out) and not torch.isnan(got_out).any()


def test_compiled_graphs_hold_the_context_as_an_int(cpu_context):
    """What torch.compile's caches keep: the context's op_id, an int (a
    constant of the graph, or once Dynamo has seen it change, an int input
    read from the context at each call), never the Context object nor a
    pointer; each context's call merges with that context; and a graph
    called for a closed context raises ValueError rather than reaching it."""
    from nccl_dcp import Context
    ctx_a, ctx_b = cpu_context(), cpu_context()
    torch._dynamo.reset()
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    holder = {"ctx": ctx_a}

    def step(po, pl):
        return holder["ctx"](po, pl, return_lse=True)

    compiled = torch.compile(step, fullgraph=True, backend=keep)
    po, pl = random_inputs(4, seed=1)
    for ctx in (ctx_a, ctx_b, ctx_a):
        holder["ctx"] = ctx
        before = len(ctx._lib.calls)
        got = compiled(po, pl)
        assert len(ctx._lib.calls) == before + 1, "the call went to another context"
        want = expected(po, pl)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    for gm in graphs:
        ops = [n for n in gm.graph.nodes if n.op == "call_function" and "nccl_dcp" in str(n.target)]
        assert len(ops) == 1, gm.graph
        op_id = ops[0].args[0]
        assert type(op_id) is int or isinstance(op_id, torch.fx.Node), op_id
        for node in gm.graph.nodes:
            assert not any(isinstance(a, Context) for a in node.args), node
    ctx_a._detach()  # closed: its id names nothing any more, and is never given out again
    holder["ctx"] = ctx_a
    # (under fullgraph, Dynamo raises its own error around the ValueError: the message is kept)
    with pytest.raises(Exception, match=r"the context is closed|names no open nccl_dcp.Context"):
        compiled(po, pl)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_graph_keeps_a_call_whose_result_is_unused(cpu_context, backend):
    """A collective is not dead code: every rank must run it, so a compiled
    graph that drops the merged result still makes the call."""
    ctx = cpu_context()
    torch._dynamo.reset()
    torch._inductor.config.compile_threads = 1

    def step(po, pl):
        ctx(po, pl, return_lse=True)  # result unused
        return po.float() * 2

    compiled = torch.compile(step, fullgraph=True, backend=backend)
    po, pl = random_inputs(3, seed=2)
    before = len(ctx._lib.calls)
    compiled(po, pl)
    compiled(po, pl)
    assert len(ctx._lib.calls) - before == 2, ctx._lib.calls[before:]


# ---- ProcessGroup helpers on a one-rank gloo group

def test_group_timeout_and_liveness(tmp_path):
    from datetime import timedelta

    import torch.distributed as dist
    from nccl_dcp import _torch
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=timedelta(seconds=77))
    try:
        group = dist.group.WORLD
        assert _torch.group_timeout(group, torch.device("cpu")) == timedelta(seconds=77)
        assert _torch.timeout_ms_of(timedelta(seconds=77)) == 77000
        assert _torch.timeout_ms_of(timedelta(days=365)) == 2**31 - 1
        assert _torch.timeout_ms_of(None) is None
        assert _torch.group_destroyed(group) is None
        sub = dist.new_group([0])
        assert _torch.group_destroyed(sub) is None
        dist.destroy_process_group(sub)
        assert _torch.group_destroyed(sub) == "its process group was destroyed or aborted"
    finally:
        dist.destroy_process_group()
    assert _torch.group_destroyed(group).startswith("torch.distributed is no longer initialized")


def test_close_and_abort_after_the_group_is_destroyed(cpu_context, tmp_path):
    """The library is never called once the group's communicator is gone:
    close() raises, abort() warns; both drop the handle."""
    import torch.distributed as dist
    from nccl_dcp import NcclDcpError
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        sub_a, sub_b = dist.new_group([0]), dist.new_group([0])
        ctx_a, ctx_b = cpu_context(), cpu_context()
        ctx_a._group, ctx_b._group = sub_a, sub_b
        dist.destroy_process_group(sub_a)
        dist.destroy_process_group(sub_b)
        with pytest.raises(NcclDcpError, match=r"^close\(\): its process group was destroyed or aborted, so the "
                                               r"context cannot be destroyed"):
            ctx_a.close()
        with pytest.warns(RuntimeWarning, match=r"abort\(\): its process group was destroyed or aborted"):
            ctx_b.abort()
        assert ctx_a.closed and ctx_b.closed
        assert ctx_a._lib.calls == [] and ctx_b._lib.calls == []
        ctx_a.close()  # idempotent now
    finally:
        dist.destroy_process_group()


# ---- scatter modes, bf16 LSEs and the call's additions (issue 27), on the stand-in
#
# With cp = 1 every mode's output is the one source's merge: out [B, Hl, D]
# (TOKEN: n_r = B). What is checked is what Python passes: the additions'
# struct, the LSE dtype, the output shapes and the refusals.

def spec1(scatter="head", lse_dtype="float32", cp=1, rank=0):
    return CallSpec(cp=cp, local_heads=HL1, head_dim=D1, dtype="bfloat16", device=0, scatter=scatter,
                    lse_dtype=lse_dtype, rank=rank)


def seqs(batch):
    """seq_lens / query_start_loc over batch rows: sequences of 2 rows, the
    second one empty on this rank (length 0), and the last row padding."""
    starts = list(range(0, batch, 2))
    qsl = torch.tensor(starts + [batch - 1], dtype=torch.int32)
    lens = torch.tensor([0 if i % 2 else 5 + i for i in range(len(starts))], dtype=torch.int32)
    return lens, qsl


def expected_masked(po, pl, sl=None, qsl=None):
    pl = pl.float()
    if sl is not None:
        empty = reference.empty_rows(po.shape[0], sl, qsl)
        pl = torch.where(empty.unsqueeze(1), torch.full_like(pl, float("-inf")), pl)
    return expected(po, pl)


def test_empty_rows_as_the_library():
    sl, qsl = torch.tensor([3, 0, 2, -1], dtype=torch.int32), torch.tensor([1, 3, 3, 6, 8], dtype=torch.int32)
    # row 0: before qsl[0]; rows 1-2: seq 0; seq 1 has no rows; 3-5: seq 2; 6-7: seq 3 (length -1); 8-9: padding
    assert reference.empty_rows(10, sl, qsl).tolist() == [True, False, False, False, False, False, True, True, True,
                                                          True]


def test_row_starts():
    assert reference.row_starts(5, 4) == [0, 2, 3, 4, 5]
    assert reference.row_starts(5, 3, [0, 5, 0]) == [0, 0, 5, 5]
    assert reference.row_starts(5, 3, torch.tensor([2, 0, 3], dtype=torch.int32)) == [0, 2, 2, 5]


@pytest.mark.parametrize("scatter", ["head", "token", "none"])
def test_each_mode_merges_with_seq_lens(cpu_context, scatter, checks):
    ctx = cpu_context(spec1(scatter))
    po, pl = random_inputs(9)
    sl, qsl = seqs(9)
    for _ in range(2):
        out, out_lse = ctx(po, pl, return_lse=True, seq_lens=sl, query_start_loc=qsl)
        want, want_lse = expected_masked(po, pl, sl, qsl)
        assert torch.equal(out, want) and torch.equal(out_lse, want_lse)
        assert torch.isinf(out_lse[-1]).all() and (out[-1] == 0).all()  # padding: empty on the only rank
    extras = ctx._lib.calls[-1][8]
    assert (extras["seqLens"], extras["queryStartLoc"], extras["numSeqs"]) == (sl.data_ptr(), qsl.data_ptr(), 5)
    assert len(checks) == 1  # the second call's layout was cached: additions do not leave the fast path
    out = ctx(po, pl)  # no additions: nothing masked
    assert torch.equal(out, expected(po, pl)[0]) and ctx._lib.calls[-1][8] is None


def test_token_host_and_device_counts(cpu_context):
    ctx = cpu_context(spec1("token"))
    po, pl = random_inputs(6)
    out = ctx(po, pl, row_counts=[6])
    assert out.shape == (6, HL1, D1) and torch.equal(out, expected(po, pl)[0])
    assert ctx._lib.calls[-1][8]["rowCounts"] == [6] and ctx._lib.calls[-1][8]["rowCountsDevice"] is None
    counts = torch.tensor([6], dtype=torch.int32)
    big = torch.full((8, HL1, D1), float("nan"), dtype=torch.bfloat16)  # room for any count: B rows and more
    lse = torch.full((8, HL1), float("nan"))
    assert ctx(po, pl, out=big, out_lse=lse, row_counts=counts)[0] is big
    assert ctx._lib.calls[-1][8]["rowCountsDevice"] == counts.data_ptr()
    with pytest.raises(ValueError, match=r"^out is required with device row_counts: the host cannot know"):
        ctx(po, pl, row_counts=counts)
    with pytest.raises(ValueError, match=r"^out_lse is required with device row_counts"):
        ctx(po, pl, out=big, row_counts=counts, return_lse=True)
    with pytest.raises(ValueError, match=r"^row_counts sum to 5, not the batch 6"):
        ctx(po, pl, row_counts=[5])
    with pytest.raises(ValueError, match=r"^out has 5 rows \(dim 0\), expected n_r = 6"):
        ctx(po, pl, out=big[:5], row_counts=[6])
    with pytest.raises(ValueError, match=r"^out has 8 rows \(dim 0\), expected n_r = 6"):
        ctx(po, pl, out=big)  # even split: n_r = 6 here, checked before the cached layout is used


def test_token_out_rows_checked_on_a_cached_layout(cpu_context):
    """The layout cache keys on shapes, not counts: out's rows are checked
    against each call's split before the launcher runs."""
    spec = spec1("token", cp=1)
    ctx = cpu_context(spec)
    po, pl = random_inputs(4)
    out = torch.empty(4, HL1, D1, dtype=torch.bfloat16)
    ctx(po, pl, out=out, row_counts=[4])
    ctx(po, pl, out=out, row_counts=[4])
    calls = len(ctx._lib.calls)
    with pytest.raises(ValueError, match=r"^row_counts sum to 3"):
        ctx(po, pl, out=out, row_counts=[3])
    assert len(ctx._lib.calls) == calls


def test_additions_refused_on_head(cpu_context):
    ctx = cpu_context(spec1("head"))
    po, pl = random_inputs(3)
    sl, qsl = seqs(3)
    with pytest.raises(ValueError, match=r"^row_counts is only for scatter='token'"):
        ctx(po, pl, row_counts=[3])
    with pytest.raises(ValueError, match=r"^seq_lens is given without query_start_loc"):
        ctx(po, pl, seq_lens=sl)
    with pytest.raises(ValueError, match=r"^seq_lens has dtype int64, expected int32"):
        ctx(po, pl, seq_lens=sl.long(), query_start_loc=qsl)
    assert ctx._lib.calls == []


@pytest.mark.parametrize("lse_dtype", [torch.bfloat16, torch.float16])
def test_low_precision_lse(cpu_context, lse_dtype, checks):
    from nccl_dcp._validate import dtype_name
    ctx = cpu_context(spec1("head", dtype_name(lse_dtype)))
    po, pl = random_inputs(5)
    pl = pl.to(lse_dtype)
    for _ in range(2):
        out, out_lse = ctx(po, pl, return_lse=True)
        assert out_lse.dtype == torch.float32
        want, want_lse = expected(po, pl.float())
        assert torch.equal(out, want) and torch.equal(out_lse, want_lse)
    out_lse = torch.empty(5, HL1)
    ctx(po, pl, out_lse=out_lse)
    assert len(checks) == 1  # return_lse's out_lse and the given one: one layout, fp32 both
    with pytest.raises(ValueError, match=rf"^partial_lse has dtype float32, expected {dtype_name(lse_dtype)}"):
        ctx(po, pl.float())
    with pytest.raises(ValueError, match=rf"^out_lse has dtype {dtype_name(lse_dtype)}, expected float32"):
        ctx(po, pl, out_lse=torch.empty(5, HL1, dtype=lse_dtype))


@pytest.mark.parametrize("scatter, rows, heads", [("head", 7, HL1), ("token", 2, 4 * HL1), ("none", 7, 4 * HL1)])
def test_ops_fake_shapes_per_mode(cpu_context, scatter, rows, heads):
    """cp = 4, rank 1: TOKEN's even split of 7 rows gives rank 1 two."""
    ctx = cpu_context(spec1(scatter, cp=4, rank=1))
    po = torch.empty(7, 4, HL1, D1, dtype=torch.bfloat16, device="meta")
    pl = torch.empty(7, 4 * HL1, dtype=torch.bfloat16, device="meta")
    out, lse = torch.ops.nccl_dcp.a2a_lse_reduce(ctx.op_id, po, pl)
    assert (out.shape, out.dtype) == ((rows, heads, D1), torch.bfloat16)
    assert (lse.shape, lse.dtype) == ((rows, heads), torch.float32)
    if scatter == "token":
        out, lse = torch.ops.nccl_dcp.a2a_lse_reduce(ctx.op_id, po, pl, [1, 5, 0, 1])
        assert out.shape == (5, heads, D1) and lse.shape == (5, heads)
    else:
        with pytest.raises(ValueError, match=r"^row_counts is only for scatter='token'"):
            torch.ops.nccl_dcp.a2a_lse_reduce(ctx.op_id, po, pl, [1, 5, 0, 1])
    assert ctx._lib.calls == []


def test_ops_fake_shapes_under_dynamic_shapes(cpu_context):
    """TOKEN's n_r of a symbolic batch: the fake implementation's arithmetic
    works on SymInts (traced symbolically, nothing runs)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    ctx = cpu_context(spec1("token", cp=4, rank=1))
    po, pl = torch.empty(7, 4 * HL1, D1, dtype=torch.bfloat16), torch.empty(7, 4 * HL1)
    gm = make_fx(lambda po, pl: torch.ops.nccl_dcp.a2a_lse_reduce(ctx.op_id, po, pl), tracing_mode="symbolic")(po, pl)
    node = next(n for n in gm.graph.nodes if n.op == "call_function" and "a2a_lse_reduce" in str(n.target))
    out, lse = node.meta["val"]
    rows = out.shape[0]
    assert isinstance(rows, torch.SymInt) and "//" in str(rows), rows  # (s0 + 2)//4: not specialized to 7's 2
    assert str(lse.shape[0]) == str(rows)
    assert out.shape[1:] == (4 * HL1, D1) and lse.shape[1] == 4 * HL1
    assert ctx._lib.calls == []


@pytest.mark.parametrize("scatter", ["token", "none"])
def test_ops_pass_opcheck_per_mode(cpu_context, scatter):
    ctx = cpu_context(spec1(scatter))
    po, pl = random_inputs(4)
    sl, qsl = seqs(4)
    torch.library.opcheck(torch.ops.nccl_dcp.a2a_lse_reduce, (ctx.op_id, po, pl, None, sl, qsl))
    out, out_lse = torch.empty(4, HL1, D1, dtype=torch.bfloat16), torch.empty(4, HL1)
    torch.library.opcheck(torch.ops.nccl_dcp.a2a_lse_reduce_out,
                          (ctx.op_id, po, pl, out, out_lse, None, None, sl, qsl))
    if scatter == "token":
        torch.library.opcheck(torch.ops.nccl_dcp.a2a_lse_reduce, (ctx.op_id, po, pl, [4], None, None))
        counts = torch.tensor([4], dtype=torch.int32)
        torch.library.opcheck(torch.ops.nccl_dcp.a2a_lse_reduce_out,
                              (ctx.op_id, po, pl, out, out_lse, None, counts, None, None))


def test_compile_token_with_counts_and_seq_lens(cpu_context):
    ctx = cpu_context(spec1("token", "bfloat16"))
    torch._dynamo.reset()

    def step(po, pl, sl, qsl, counts, out, out_lse):
        merged, lse = ctx(po, pl, return_lse=True, row_counts=[po.shape[0]], seq_lens=sl, query_start_loc=qsl)
        ctx(po, pl, out=out, out_lse=out_lse, row_counts=counts)  # device counts: the in-place op
        return merged.float() * 2, lse

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    po, pl = random_inputs(6)
    pl = pl.bfloat16()
    sl, qsl = seqs(6)
    counts = torch.tensor([6], dtype=torch.int32)
    out, out_lse = torch.full((6, HL1, D1), float("nan"), dtype=torch.bfloat16), torch.full((6, HL1), float("nan"))
    got = compiled(po, pl, sl, qsl, counts, out, out_lse)
    want, want_lse = expected_masked(po, pl, sl, qsl)
    assert torch.equal(got[0], want.float() * 2) and torch.equal(got[1], want_lse)
    assert torch.equal(out, expected(po, pl.float())[0]) and torch.equal(out_lse, expected(po, pl.float())[1])
