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


# ---- scatter modes, the LSE dtype and the call's additions (issue 27)

from nccl_dcp import _abi  # noqa: E402
from nccl_dcp._validate import UNKNOWN_ROWS, check_call_args, even_rows, out_rows  # noqa: E402

H = CP * HL


def spec_of(scatter="head", lse_dtype="float32", rank=1):
    return CallSpec(cp=CP, local_heads=HL, head_dim=D, dtype="bfloat16", device=0, scatter=scatter,
                    lse_dtype=lse_dtype, rank=rank)


def mode_tensors(scatter, rows, batch=B, lse_dtype="float32"):
    heads = HL if scatter == "head" else H
    return (FakeTensor((batch, H, D), data_ptr=0x10000000),
            FakeTensor((batch, H), lse_dtype, data_ptr=0x20000000),
            FakeTensor((rows, heads, D), data_ptr=0x30000000),
            FakeTensor((rows, heads), "float32", data_ptr=0x40000000))


def test_even_split_gives_the_first_ranks_one_row_more():
    for batch in (0, 1, 3, 4, 5, 7, 8, 97):
        rows = [even_rows(batch, CP, r) for r in range(CP)]
        assert sum(rows) == batch and max(rows) - min(rows) <= 1 and rows == sorted(rows, reverse=True)
        assert rows[:batch % CP] == [batch // CP + 1] * (batch % CP)
    assert [even_rows(5, 4, r) for r in range(4)] == [2, 1, 1, 1]
    assert [even_rows(1, 4, r) for r in range(4)] == [1, 0, 0, 0]


@pytest.mark.parametrize("scatter, rows", [("head", B), ("token", 1), ("none", B)])
def test_each_mode_passes_its_out_shape_and_strides(scatter, rows):
    spec = spec_of(scatter)
    assert out_rows(spec, B) == rows
    heads = HL if scatter == "head" else H
    args = check_call(spec, *mode_tensors(scatter, rows))
    assert (args.strides["outRow"] if rows > 1 else heads * D, args.strides["outHead"]) == (heads * D, D)
    assert args.strides["outLseHead"] == 1


def test_token_rows_of_each_rank():
    for rank, rows in enumerate((2, 1, 1, 1)):
        check_call(spec_of("token", rank=rank), *mode_tensors("token", rows))
    check_call(spec_of("token", rank=3), *mode_tensors("token", 0, batch=3))  # no rows on this rank
    # host counts: rank 1's share
    check_call(spec_of("token"), *mode_tensors("token", 4), rows=4)
    # device counts: any rows (the host cannot know n_r)
    check_call(spec_of("token"), *mode_tensors("token", B), rows=UNKNOWN_ROWS)


def test_bf16_lse_strides_are_in_its_elements():
    spec = spec_of("head", "bfloat16")
    pl = FakeTensor((B, H + 8), "bfloat16", data_ptr=0x20000002).narrow_last(H)  # 2-byte aligned is enough
    po, _, out, out_lse = mode_tensors("head", B, lse_dtype="bfloat16")
    s = check_call(spec, po, pl, out, out_lse).strides
    assert (s["lseRow"], s["lsePeer"], s["lseHead"]) == (H + 8, HL, 1)


MODE_REFUSED = {
    "token out of HEAD's shape": ("token", lambda t: (t[0], t[1], FakeTensor((1, HL, D), data_ptr=0x30000000), None),
                                  r"^out has shape \[1, 8, 64\], expected \[n_r, H, D\] = \[n_r, 32, 64\] \(TOKEN "
                                  r"scatter\)"),
    "token out of B rows": ("token", lambda t: (t[0], t[1], FakeTensor((B, H, D), data_ptr=0x30000000), None),
                            r"^out has 5 rows \(dim 0\), expected n_r = 1: rank 1's rows of the TOKEN split of 5"),
    "token out_lse rows": ("token", lambda t: (t[0], t[1], t[2], FakeTensor((2, H), "float32", data_ptr=0x40000000)),
                           r"^out_lse has 2 rows \(dim 0\), expected n_r = 1"),
    "none out of Hl heads": ("none", lambda t: (t[0], t[1], FakeTensor((B, HL, D), data_ptr=0x30000000), None),
                             r"^out has shape \[5, 8, 64\], expected \[B, H, D\] = \[B, 32, 64\] \(NONE scatter\)"),
    "none out rows": ("none", lambda t: (t[0], t[1], FakeTensor((B - 1, H, D), data_ptr=0x30000000), None),
                      r"^out has 4 rows \(dim 0\), partial_out has 5"),
    "none out_lse heads": ("none", lambda t: (t[0], t[1], t[2], FakeTensor((B, HL), "float32", data_ptr=0x40000000)),
                           r"^out_lse has shape \[5, 8\], expected \[B, H\] = \[B, 32\] \(NONE scatter\)"),
    "head out of H heads": ("head", lambda t: (t[0], t[1], FakeTensor((B, H, D), data_ptr=0x30000000), None),
                            r"^out has shape \[5, 32, 64\], expected \[B, Hl, D\]"),
}


@pytest.mark.parametrize("case", sorted(MODE_REFUSED))
def test_mode_refused(case):
    scatter, edit, pattern = MODE_REFUSED[case]
    spec = spec_of(scatter)
    with pytest.raises(ValueError, match=pattern):
        check_call(spec, *edit(mode_tensors(scatter, out_rows(spec, B))))


@pytest.mark.parametrize("lse_dtype", ["bfloat16", "float16"])
def test_lse_dtype_refusals(lse_dtype):
    spec = spec_of("none", lse_dtype)
    po, pl, out, out_lse = mode_tensors("none", B, lse_dtype=lse_dtype)
    check_call(spec, po, pl, out, out_lse)
    with pytest.raises(ValueError, match=rf"^partial_lse has dtype float32, expected {lse_dtype}"):
        check_call(spec, po, FakeTensor((B, H), "float32", data_ptr=0x20000000), out, out_lse)
    with pytest.raises(ValueError, match=rf"^out_lse has dtype {lse_dtype}, expected float32"):
        check_call(spec, po, pl, out, FakeTensor((B, H), lse_dtype, data_ptr=0x40000000))
    with pytest.raises(ValueError, match=r"^partial_lse.data_ptr\(\) 0x20000001 is not 2-byte aligned"):
        check_call(spec, po, FakeTensor((B, H), lse_dtype, data_ptr=0x20000001), out, out_lse)
    with pytest.raises(ValueError, match=r"^partial_lse.data_ptr\(\) 0x20000002 is not 4-byte aligned"):
        check_call(spec_of("none"), po, FakeTensor((B, H), "float32", data_ptr=0x20000002), out, out_lse)


def ints(n, data_ptr=0x50000000, device=None, strides=None):
    return FakeTensor((n,), "int32", device=device, strides=strides, data_ptr=data_ptr)


def test_call_args_host_counts():
    extras = check_call_args(spec_of("token"), 7, row_counts=[0, 4, 3, 0])
    assert extras.rows == 4 and not extras.device_counts
    assert extras.struct.magic == _abi.CALL_ARGS_MAGIC and extras.struct.rowCountsDevice is None
    import ctypes
    assert list(ctypes.cast(extras.struct.rowCounts, ctypes.POINTER(ctypes.c_int))[:CP]) == [0, 4, 3, 0]
    assert check_call_args(spec_of("token", rank=0), 7, row_counts=(0, 4, 3, 0)).rows == 0


def test_call_args_device_counts_and_seq_lens():
    extras = check_call_args(spec_of("token"), 7, row_counts=ints(CP, 0x50000000), seq_lens=ints(3, 0x60000000),
                             query_start_loc=ints(4, 0x70000000))
    assert extras.rows == UNKNOWN_ROWS and extras.device_counts
    s = extras.struct
    assert (s.rowCounts, s.rowCountsDevice, s.seqLens, s.queryStartLoc, s.numSeqs) == (
        None, 0x50000000, 0x60000000, 0x70000000, 3)


@pytest.mark.parametrize("scatter", ["head", "token", "none"])
def test_call_args_seq_lens_in_every_mode(scatter):
    extras = check_call_args(spec_of(scatter), B, seq_lens=ints(1), query_start_loc=ints(2, 0x50000010))
    assert extras.struct.numSeqs == 1 and extras.rows == out_rows(spec_of(scatter), B)
    none = check_call_args(spec_of(scatter), B)
    assert none.struct is None and none.rows == out_rows(spec_of(scatter), B)


CUDA1 = FakeDevice("cuda", 1)
ARGS_REFUSED = {
    "counts on head": ("head", dict(row_counts=[2, 1, 1, 1]), r"^row_counts is only for scatter='token'; this "
                                                               r"context's scatter is 'head'"),
    "counts on none": ("none", dict(row_counts=ints(CP)), r"^row_counts is only for scatter='token'"),
    "counts length": ("token", dict(row_counts=[5, 0]), r"^row_counts has 2 entries, expected cp = 4"),
    "counts negative": ("token", dict(row_counts=[6, -1, 0, 0]), r"^row_counts\[1\] = -1 is negative"),
    "counts sum": ("token", dict(row_counts=[1, 1, 1, 1]), r"^row_counts sum to 4, not the batch 5"),
    "counts float": ("token", dict(row_counts=[2.0, 1, 1, 1]), r"^row_counts\[0\] must be an int, got 2.0"),
    "counts bool": ("token", dict(row_counts=[True, 2, 1, 1]), r"^row_counts\[0\] must be an int"),
    "counts type": ("token", dict(row_counts={0: 5}), r"^row_counts must be a list or tuple of ints .* got dict"),
    "device counts dtype": ("token", dict(row_counts=FakeTensor((CP,), "int64")),
                            r"^row_counts has dtype int64, expected int32"),
    "device counts on cpu": ("token", dict(row_counts=ints(CP, device=CPU)),
                             r"^row_counts is on cpu, but the kernels read it: it must be an int32 tensor on cuda:0"),
    "device counts other gpu": ("token", dict(row_counts=ints(CP, device=CUDA1)), r"^row_counts is on cuda:1"),
    "device counts shape": ("token", dict(row_counts=ints(CP + 1)), r"^row_counts has shape \[5\], expected \[cp\] "
                                                                    r"= \[4\]"),
    "device counts strided": ("token", dict(row_counts=ints(CP, strides=(2,))), r"^row_counts has stride 2: it must "
                                                                                 r"be contiguous"),
    "device counts misaligned": ("token", dict(row_counts=ints(CP, data_ptr=0x50000002)),
                                 r"^row_counts.data_ptr\(\) 0x50000002 is not 4-byte aligned"),
    "seq_lens alone": ("head", dict(seq_lens=ints(2)), r"^seq_lens is given without query_start_loc: give both"),
    "qsl alone": ("none", dict(query_start_loc=ints(3)), r"^query_start_loc is given without seq_lens"),
    "seq_lens empty": ("head", dict(seq_lens=ints(0), query_start_loc=ints(1)),
                       r"^seq_lens has shape \[0\], expected \[numSeqs\] with numSeqs >= 1"),
    "seq_lens 2-d": ("head", dict(seq_lens=FakeTensor((2, 1), "int32"), query_start_loc=ints(3)),
                     r"^seq_lens has shape \[2, 1\]"),
    "seq_lens dtype": ("token", dict(seq_lens=FakeTensor((2,), "int64"), query_start_loc=ints(3)),
                       r"^seq_lens has dtype int64, expected int32"),
    "seq_lens list": ("head", dict(seq_lens=[1, 2], query_start_loc=ints(3)),
                      r"^seq_lens must be an int32 CUDA tensor, got list"),
    "qsl shape": ("head", dict(seq_lens=ints(2), query_start_loc=ints(2)),
                  r"^query_start_loc has shape \[2\], expected \[numSeqs \+ 1\] = \[3\] \(seq_lens has 2 entries\)"),
    "qsl on cpu": ("head", dict(seq_lens=ints(2), query_start_loc=ints(3, device=CPU)), r"^query_start_loc is on cpu"),
}


@pytest.mark.parametrize("case", sorted(ARGS_REFUSED))
def test_call_args_refused(case):
    scatter, kwargs, pattern = ARGS_REFUSED[case]
    with pytest.raises(ValueError, match=pattern):
        check_call_args(spec_of(scatter), B, **kwargs)
