"""The call checks (nccl_dcp._validate) on fake tensors: no torch, no GPU,
no library. Every refused call names the argument."""

import pytest

from fake_tensor import FakeDevice, FakeTensor
from nccl_dcp._validate import CallSpec, check_call, dtype_name, make_strides

CP, HL, D, B = 4, 8, 64, 5
SPEC = CallSpec(cp=CP, local_heads=HL, head_dim=D, dtype="bfloat16", device=0)


def packed(batch=B, dtype="bfloat16"):
    """partial_out, partial_lse, out, out_lse of the packed layout, at distinct addresses."""
    return (FakeTensor((batch, CP * HL, D), dtype, data_ptr=0x10000000),
            FakeTensor((batch, CP * HL), "float32", data_ptr=0x20000000),
            FakeTensor((batch, HL, D), dtype, data_ptr=0x30000000),
            FakeTensor((batch, HL), "float32", data_ptr=0x40000000))


def check(po, pl, out, out_lse=None, spec=SPEC):
    return check_call(spec, po, pl, out, out_lse)


# ---- accepted layouts: the strides the library receives

def test_packed_layout_passes_packed_strides():
    args = check(*packed())
    assert args.batch == B
    assert args.strides == {
        "inRow": CP * HL * D, "inPeer": HL * D, "inHead": D,
        "lseRow": CP * HL, "lsePeer": HL, "lseHead": 1,
        "outRow": HL * D, "outHead": D, "outLseRow": HL, "outLseHead": 1}


def test_transposed_attention_layout_is_passed_as_strides():
    # The attention kernel's [B, Hl, cp, D] buffer, seen as [B, cp, Hl, D]:
    # the header's inPeer = D, inHead = cp * D, inRow = Hl * cp * D.
    po = FakeTensor((B, HL, CP, D)).transpose(1, 2)
    pl = FakeTensor((B, HL, CP), "float32").transpose(1, 2)
    _, _, out, out_lse = packed()
    s = check(po, pl, out, out_lse).strides
    assert (s["inRow"], s["inPeer"], s["inHead"]) == (HL * CP * D, D, CP * D)
    assert (s["lseRow"], s["lsePeer"], s["lseHead"]) == (HL * CP, 1, CP)


def test_padded_rows_and_strided_outputs():
    pad = 8  # 16 bytes of bf16
    po = FakeTensor((B, CP * HL, D + pad)).narrow_last(D)
    pl = FakeTensor((B, CP * HL + 3), "float32").narrow_last(CP * HL)
    out = FakeTensor((B, HL, D + pad)).narrow_last(D)
    out_lse = FakeTensor((B, HL + 1), "float32").narrow_last(HL)
    s = check(po, pl, out, out_lse).strides
    assert (s["inRow"], s["inPeer"], s["inHead"]) == (CP * HL * (D + pad), HL * (D + pad), D + pad)
    assert (s["lseRow"], s["lsePeer"], s["lseHead"]) == (CP * HL + 3, HL, 1)
    assert (s["outRow"], s["outHead"]) == (HL * (D + pad), D + pad)
    assert (s["outLseRow"], s["outLseHead"]) == (HL + 1, 1)


def test_size_one_dimensions_pass_as_packed():
    # torch may give a dimension of size 1 any stride; the library never uses it.
    spec = CallSpec(cp=1, local_heads=1, head_dim=D, dtype="bfloat16", device=0)
    po = FakeTensor((1, 1, 1, D), strides=(3, 5, 7, 1))
    pl = FakeTensor((1, 1, 1), "float32", strides=(3, 5, 7))
    out = FakeTensor((1, 1, D), strides=(3, 7, 1))
    s = check(po, pl, out, spec=spec).strides
    assert all(s[k] == 0 for k in ("inRow", "inPeer", "inHead", "lseRow", "lsePeer", "lseHead", "outRow", "outHead"))


def test_batch_zero_and_no_out_lse():
    po, pl, out, _ = packed(batch=0)
    args = check(po, pl, out, None)
    assert args.batch == 0
    assert "outLseRow" not in args.strides


def test_strides_struct_carries_the_values():
    st = make_strides(check(*packed()))
    assert (st.inRow, st.inPeer, st.inHead, st.outLseHead) == (CP * HL * D, HL * D, D, 1)
    assert st.magic == 0xDC95721D and st.size == 96


def test_dtype_names():
    assert dtype_name("torch.bfloat16") == "bfloat16"
    assert dtype_name("bf16") == "bfloat16"
    assert dtype_name("half") == "float16"
    assert dtype_name("fp32") == "float32"
    assert dtype_name("float32") == "float32"


# ---- refused calls: each names its argument

def replace(index, tensor):
    args = list(packed())
    args[index] = tensor
    return args


CPU = FakeDevice("cpu", None)
PO, PL, OUT, OLSE = 0, 1, 2, 3

# case: (which argument, its replacement, the message expected)
REFUSED = {
    "partial_out 2-d": (PO, FakeTensor((B, CP * HL * D)), r"^partial_out has shape .* expected \[B, cp\*Hl, D\]"),
    "partial_out heads": (PO, FakeTensor((B, CP * HL + 1, D)), r"^partial_out has shape \[5, 33, 64\]"),
    "partial_out head_dim": (PO, FakeTensor((B, CP, HL, D * 2)), r"^partial_out has shape"),
    "partial_out dtype": (PO, FakeTensor((B, CP * HL, D), "float16"),
                          r"^partial_out has dtype float16, expected bfloat16"),
    "partial_out cpu": (PO, FakeTensor((B, CP * HL, D), device=CPU), r"^partial_out is on cpu, but .* cuda:0"),
    "partial_out other gpu": (PO, FakeTensor((B, CP * HL, D), device=FakeDevice("cuda", 1)),
                              r"^partial_out is on cuda:1"),
    "partial_out last dim": (PO, FakeTensor((B, CP * HL, D), strides=(CP * HL * D * 2, D * 2, 2)),
                             r"^partial_out must be contiguous in its last dimension"),
    "partial_out head stride": (PO, FakeTensor((B, CP * HL, D + 4)).narrow_last(D),
                                r"^partial_out has stride 68 elements \(136 bytes\) in dim 1"),
    "partial_out broadcast": (PO, FakeTensor((B, CP * HL, D), strides=(0, D, 1)),
                              r"^partial_out has stride 0 in dim 0 .*contiguous\(\)"),
    "partial_out misaligned": (PO, FakeTensor((B, CP * HL, D)).offset(4),
                               r"^partial_out.data_ptr\(\) 0x[0-9a-f]*8 is not 16-byte aligned"),
    "partial_lse rows": (PL, FakeTensor((B + 1, CP * HL), "float32"),
                         r"^partial_lse has 6 rows \(dim 0\), partial_out has 5"),
    "partial_lse dtype": (PL, FakeTensor((B, CP * HL), "bfloat16"),
                          r"^partial_lse has dtype bfloat16, expected float32"),
    "partial_lse shape": (PL, FakeTensor((B, CP, HL, 1), "float32"),
                          r"^partial_lse has shape .* expected \[B, cp\*Hl\]"),
    "partial_lse cpu": (PL, FakeTensor((B, CP * HL), "float32", device=CPU), r"^partial_lse is on cpu"),
    "partial_lse broadcast": (PL, FakeTensor((B, CP * HL), "float32", strides=(CP * HL, 0)),
                              r"^partial_lse has stride 0 in dim 1"),
    "out rows": (OUT, FakeTensor((B - 1, HL, D)), r"^out has 4 rows"),
    "out heads": (OUT, FakeTensor((B, HL * 2, D)), r"^out has shape .* expected \[B, Hl, D\] = \[B, 8, 64\]"),
    "out dtype": (OUT, FakeTensor((B, HL, D), "float32"), r"^out has dtype float32, expected bfloat16"),
    "out head stride": (OUT, FakeTensor((B, HL, D + 2)).narrow_last(D), r"^out has stride 66 elements \(132 bytes\)"),
    "out misaligned": (OUT, FakeTensor((B, HL, D)).offset(1), r"^out.data_ptr\(\) .* not 16-byte aligned"),
    "out last dim": (OUT, FakeTensor((B, D, HL)).transpose(1, 2), r"^out must be contiguous in its last dimension"),
    "out_lse rows": (OLSE, FakeTensor((B + 2, HL), "float32"), r"^out_lse has 7 rows"),
    "out_lse shape": (OLSE, FakeTensor((B, HL, 1), "float32"), r"^out_lse has shape"),
    "out_lse dtype": (OLSE, FakeTensor((B, HL), "float16"), r"^out_lse has dtype float16"),
    "out_lse device": (OLSE, FakeTensor((B, HL), "float32", device=FakeDevice("cuda", 3)), r"^out_lse is on cuda:3"),
}


def test_not_a_tensor():
    po, pl, out, _ = packed()
    with pytest.raises(ValueError, match=r"^partial_lse must be a tensor, got list"):
        check(po, [0.0] * B, out)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused(case):
    index, tensor, pattern = REFUSED[case]
    with pytest.raises(ValueError, match=pattern):
        check(*replace(index, tensor))
