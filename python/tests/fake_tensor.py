"""A tensor-shaped stand-in (shape, stride(), dtype, device, data_ptr()):
enough for the argument checks, with no torch and no GPU."""


class FakeDevice:
    def __init__(self, type="cuda", index=0):
        self.type = type
        self.index = index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


def contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


class FakeTensor:
    ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}

    def __init__(self, shape, dtype="bfloat16", device=None, strides=None, data_ptr=0x7F0000000000):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device or FakeDevice()
        self._strides = tuple(strides) if strides is not None else contiguous_strides(shape)
        self._data_ptr = data_ptr

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._data_ptr

    def transpose(self, a, b):
        shape, strides = list(self.shape), list(self._strides)
        shape[a], shape[b] = shape[b], shape[a]
        strides[a], strides[b] = strides[b], strides[a]
        return FakeTensor(shape, self.dtype, self.device, strides, self._data_ptr)

    def narrow_last(self, n):
        """self[..., :n]: same strides, fewer elements in the last dim."""
        return FakeTensor(self.shape[:-1] + (n,), self.dtype, self.device, self._strides, self._data_ptr)

    def offset(self, elements):
        """The same view starting `elements` further on."""
        return FakeTensor(self.shape, self.dtype, self.device, self._strides,
                          self._data_ptr + elements * self.ELEMENT_BYTES[self.dtype])
