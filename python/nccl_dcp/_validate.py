"""Argument checks of a call, before anything reaches the library.

Works on anything tensor-shaped (duck typing, no torch import): a tensor is
read through `.shape`, `.stride()`, `.dtype`, `.device` (`.type`,
`.index`) and `.data_ptr()`, so the checks run without torch and without a
GPU (tests/test_validate.py uses a small fake tensor). Every failure is a
ValueError naming the argument and the rule it broke.

Accepted layouts (element strides; the last dimension contiguous):
  partial_out  [B, cp*Hl, D]  or [B, cp, Hl, D]  (e.g. the attention
               kernel's [B, Hl, cp, D] buffer passed as .transpose(1, 2))
  partial_lse  [B, cp*Hl]     or [B, cp, Hl], float32
  out          [B, Hl, D]
  out_lse      [B, Hl], float32
Strides are passed to the library as they are (ncclDcpStrides_t), never
copied. A dimension of size 1 is passed as 0 ("packed"): its stride is
never used, and torch may give it any value.
"""

from dataclasses import dataclass

from . import _abi

# Bytes per element of the dtypes the library moves, by canonical name.
ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32",
                  "float": "float32"}


def dtype_name(dtype):
    """Canonical name of a dtype given as a torch.dtype or a string
    ("bf16", "torch.bfloat16", ...)."""
    name = dtype if isinstance(dtype, str) else str(dtype)
    if name.startswith("torch."):
        name = name[len("torch."):]
    return _DTYPE_ALIASES.get(name, name)


@dataclass(frozen=True)
class CallSpec:
    """What one context's calls must look like."""

    cp: int            # ranks of the communicator
    local_heads: int   # Hl
    head_dim: int      # D
    dtype: str         # canonical name of partial_out's and out's element type
    device: int        # CUDA device index of the communicator


@dataclass(frozen=True)
class CallArgs:
    """A checked call: the batch and the library's strides."""

    batch: int
    strides: dict  # ncclDcpStrides_t field -> elements (0 = packed / unused)


def _shape(t):
    return tuple(int(s) for s in t.shape)


def _strides(t):
    return tuple(int(s) for s in t.stride())


def _check_device(name, t, spec):
    dev = t.device
    if getattr(dev, "type", None) != "cuda" or getattr(dev, "index", None) != spec.device:
        raise ValueError(f"{name} is on {dev}, but the context's communicator is on cuda:{spec.device}")


def _check_dtype(name, t, want):
    got = dtype_name(t.dtype)
    if got != want:
        raise ValueError(f"{name} has dtype {got}, expected {want}")


def _check_shape(name, t, layouts):
    """layouts: {rank: (expected shape with None = any, text)}. Returns the shape."""
    shape = _shape(t)
    layout = layouts.get(len(shape))
    if layout is None or any(w is not None and w != s for w, s in zip(layout[0], shape)):
        wanted = " or ".join(text for _, text in layouts.values())
        raise ValueError(f"{name} has shape {list(shape)}, expected {wanted}")
    return shape


def _dims(name, names, sizes, strides, user_dims, elt_bytes, align16):
    """Checks the strides of the dimensions named `names` (outermost first;
    the innermost contiguous run is already checked) and returns them as
    library strides: 0 for a dimension of size 1. user_dims: the tensor's
    dimension each one comes from, for the messages."""
    out = {}
    for field, size, stride, dim in zip(names, sizes, strides, user_dims):
        if size <= 1:
            out[field] = 0
            continue
        if stride > _abi.INT64_MAX // max(elt_bytes, 1):
            raise ValueError(f"{name} has stride {stride} in dim {dim}: out of range of a byte offset (int64)")
        if stride <= 0:
            raise ValueError(
                f"{name} has stride {stride} in dim {dim} (size {size}): a broadcast or reversed view cannot be "
                f"passed without a copy; use {name}.contiguous()")
        if align16 and stride * elt_bytes % 16 != 0:
            raise ValueError(
                f"{name} has stride {stride} elements ({stride * elt_bytes} bytes) in dim {dim}: every stride of "
                f"{name} must be a multiple of 16 bytes")
        out[field] = stride
    return out


def _check_inner_contiguous(name, t, shape):
    if shape[-1] > 1 and _strides(t)[-1] != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension (head_dim); its stride there is "
                         f"{_strides(t)[-1]}")


def _check_aligned(name, t, alignment):
    ptr = int(t.data_ptr())
    if ptr % alignment != 0:
        raise ValueError(f"{name}.data_ptr() {ptr:#x} is not {alignment}-byte aligned")


def _check_rows(name, shape, batch):
    if shape[0] != batch:
        raise ValueError(f"{name} has {shape[0]} rows (dim 0), partial_out has {batch}")


def _row_peer_head(flat, shape, strides, hl):
    """(sizes, strides, tensor dims) of the row, peer and head dimensions:
    flat = [B, cp*Hl, ...] (head h = p * Hl + j, so the peer stride is Hl
    head strides), else [B, cp, Hl, ...]."""
    if flat:
        return (shape[0], shape[1] // hl, hl), (strides[0], hl * strides[1], strides[1]), (0, 1, 1)
    return shape[:3], strides[:3], (0, 1, 2)


def check_call(spec, partial_out, partial_lse, out, out_lse):
    """Checks one call's tensors against spec; returns CallArgs. out_lse may be None."""
    cp, hl, d = spec.cp, spec.local_heads, spec.head_dim
    elt = ELEMENT_BYTES[spec.dtype]
    for name, t in (("partial_out", partial_out), ("partial_lse", partial_lse), ("out", out), ("out_lse", out_lse)):
        if (t is not None or name != "out_lse") and not all(hasattr(t, a) for a in ("shape", "stride", "dtype", "device", "data_ptr")):
            raise ValueError(f"{name} must be a tensor, got {type(t).__name__}")

    # partial_out: [B, cp*Hl, D] or [B, cp, Hl, D] of the context's dtype.
    shape = _check_shape("partial_out", partial_out, {
        3: ((None, cp * hl, d), f"[B, cp*Hl, D] = [B, {cp * hl}, {d}]"),
        4: ((None, cp, hl, d), f"[B, cp, Hl, D] = [B, {cp}, {hl}, {d}]")})
    batch = shape[0]
    if batch >= 2**31:
        raise ValueError(f"partial_out has {batch} rows: at most 2^31 - 1 per call")
    _check_dtype("partial_out", partial_out, spec.dtype)
    _check_device("partial_out", partial_out, spec)
    _check_inner_contiguous("partial_out", partial_out, shape)
    result = _dims("partial_out", ("inRow", "inPeer", "inHead"),
                   *_row_peer_head(len(shape) == 3, shape, _strides(partial_out), hl), elt, True)
    _check_aligned("partial_out", partial_out, 16)

    # partial_lse: [B, cp*Hl] or [B, cp, Hl], float32.
    shape = _check_shape("partial_lse", partial_lse, {
        2: ((None, cp * hl), f"[B, cp*Hl] = [B, {cp * hl}]"),
        3: ((None, cp, hl), f"[B, cp, Hl] = [B, {cp}, {hl}]")})
    _check_rows("partial_lse", shape, batch)
    _check_dtype("partial_lse", partial_lse, "float32")
    _check_device("partial_lse", partial_lse, spec)
    result.update(_dims("partial_lse", ("lseRow", "lsePeer", "lseHead"),
                        *_row_peer_head(len(shape) == 2, shape, _strides(partial_lse), hl), 4, False))
    _check_aligned("partial_lse", partial_lse, 4)

    # out: [B, Hl, D] of the context's dtype.
    shape = _check_shape("out", out, {3: ((None, hl, d), f"[B, Hl, D] = [B, {hl}, {d}]")})
    _check_rows("out", shape, batch)
    _check_dtype("out", out, spec.dtype)
    _check_device("out", out, spec)
    _check_inner_contiguous("out", out, shape)
    result.update(_dims("out", ("outRow", "outHead"), shape[:2], _strides(out)[:2], (0, 1), elt, True))
    _check_aligned("out", out, 16)

    # out_lse: [B, Hl], float32, optional.
    if out_lse is not None:
        shape = _check_shape("out_lse", out_lse, {2: ((None, hl), f"[B, Hl] = [B, {hl}]")})
        _check_rows("out_lse", shape, batch)
        _check_dtype("out_lse", out_lse, "float32")
        _check_device("out_lse", out_lse, spec)
        result.update(_dims("out_lse", ("outLseRow", "outLseHead"), shape, _strides(out_lse), (0, 1), 4, False))
        _check_aligned("out_lse", out_lse, 4)
    return CallArgs(batch=batch, strides=result)


def make_strides(call_args):
    """The ncclDcpStrides_t of a checked call."""
    return _abi.Strides(**call_args.strides)
