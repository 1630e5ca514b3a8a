"""With torch but without a GPU: real torch tensors through the call checks,
the PyTorch reference merge (nccl_dcp.reference) on hand-computed cases,
and Context.__call__ refusing bad tensors before the library is called."""

import math

import pytest

from fake_tensor import FakeDevice
from nccl_dcp._validate import CallSpec, check_call

torch = pytest.importorskip("torch", reason="torch is not installed")
from nccl_dcp import reference  # noqa: E402  (needs torch)

CP, HL, D, B = 2, 4, 64, 3
SPEC = CallSpec(cp=CP, local_heads=HL, head_dim=D, dtype="bfloat16", device=0)


class OnGpu0:
    """A CPU tensor presented as living on cuda:0: torch's own shape,
    stride(), dtype and data_ptr() go through the checks."""

    device = FakeDevice("cuda", 0)

    def __init__(self, t):
        self.t = t
        self.shape, self.dtype = t.shape, t.dtype

    def stride(self):
        return self.t.stride()

    def data_ptr(self):
        return self.t.data_ptr()


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


# ---- Context.__call__ checks before the library

class StubLibrary:
    def __init__(self):
        self.calls = []
        self.cdll = self

    def ncclDcpA2aLseReduce(self, *args):
        self.calls.append(args)
        return 0

    def check(self, result, what):
        assert result == 0, what


def stub_context():
    from nccl_dcp import Context
    ctx = object.__new__(Context)
    ctx._lib, ctx._handle, ctx._stream, ctx._checked, ctx.spec = StubLibrary(), 1, None, {}, SPEC
    return ctx


def test_call_refuses_cpu_tensors_before_the_library():
    ctx = stub_context()
    po, pl = torch.zeros(B, CP * HL, D, dtype=torch.bfloat16), torch.zeros(B, CP * HL)
    out, out_lse = torch.zeros(B, HL, D, dtype=torch.bfloat16), torch.zeros(B, HL)
    with pytest.raises(ValueError, match=r"^partial_out is on cpu"):
        ctx(po, pl, out=out, out_lse=out_lse)
    assert ctx._lib.calls == []
    ctx._handle = None
    with pytest.raises(ValueError, match=r"^the context is closed"):
        ctx(po, pl, out=out)


def test_call_passes_pointers_and_strides_and_checks_each_layout_once():
    ctx = stub_context()
    po, pl, out, out_lse = tensors()
    for _ in range(2):
        got = ctx(po, pl, out=out, out_lse=out_lse, stream=0)
    assert got == (out, out_lse)
    assert len(ctx._lib.calls) == 2 and len(ctx._checked) == 1
    handle, *ptrs, batch, strides, stream = ctx._lib.calls[0]
    assert ptrs == [po.data_ptr(), pl.data_ptr(), out.data_ptr(), out_lse.data_ptr()]
    assert (handle, batch, stream) == (1, B, 0)
    assert (strides._obj.inRow, strides._obj.inPeer, strides._obj.outLseRow) == (CP * HL * D, HL * D, HL)
    # Another layout is checked on its own, and a bad one is still refused.
    transposed = OnGpu0(torch.zeros(B, HL, CP, D, dtype=torch.bfloat16).transpose(1, 2))
    ctx(transposed, pl, out=out, stream=0)
    assert ctx._lib.calls[-1][6]._obj.inHead == CP * D and len(ctx._checked) == 2
    with pytest.raises(ValueError, match=r"^out has dtype float32"):
        ctx(po, pl, out=OnGpu0(torch.zeros(B, HL, D)), stream=0)
    with pytest.raises(ValueError, match=r"stream 0x1 is not the stream 0x0 this context is bound to"):
        ctx(po, pl, out=out, stream=1)
    ctx._handle = None
