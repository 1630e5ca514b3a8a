"""Leaving `with Context(...) as ctx:` (CPU, no library): close() when
leaving normally or on an error that left the context sound; abort() (local)
when leaving on an error after a peer failed -- the library's
ncclRemoteError, or the context poisoned (async_error()) -- since close()
is collective and would wait up to the timeout on the failed peer, then
raise over the original error. The context is a stand-in: Context's own
__exit__ on an object whose close / abort / async_error record the calls."""

import pytest

from nccl_dcp import _abi
from nccl_dcp._library import NcclDcpArgumentError, NcclDcpError
from nccl_dcp.context import Context


def stand_in(async_error=None, async_raises=False):
    """A Context (never created: no library) whose lifetime calls are recorded."""
    ctx = object.__new__(Context)
    ctx._h, ctx._launcher, ctx._op_id = 0x1234, None, None
    ctx.ended = []

    def close():
        ctx.ended.append("close")
        ctx._h = None

    def abort():
        ctx.ended.append("abort")
        ctx._h = None

    def read_async_error():
        if async_raises:
            raise ValueError("the context is closed")
        return async_error

    ctx.close, ctx.abort, ctx.async_error = close, abort, read_async_error
    return ctx


REMOTE = NcclDcpError(_abi.NCCL_REMOTE_ERROR, "ncclDcpA2aLseReduceEx failed: ncclRemoteError: a peer did not take part")
POISONED = NcclDcpError(_abi.NCCL_REMOTE_ERROR, "nccl_dcp context (rank 0 of 2) is poisoned")


@pytest.mark.parametrize("error, async_error, ended", [
    (None, None, "close"),                                     # normal exit
    (None, POISONED, "close"),                                 # normal exit: close() says what is wrong
    (RuntimeError("engine bug"), None, "close"),               # the context is sound: collective close
    (NcclDcpArgumentError(_abi.NCCL_INVALID_ARGUMENT, "bad out"), None, "close"),  # refused locally
    (REMOTE, None, "abort"),                                   # a peer did not take part
    (RuntimeError("engine bug"), POISONED, "abort"),           # the context reports the peer's failure
    (KeyboardInterrupt(), POISONED, "abort"),
], ids=["normal", "normal_poisoned", "error", "argument_error", "remote_error", "error_poisoned", "interrupt_poisoned"])
def test_with_block_closes_or_aborts(error, async_error, ended):
    ctx = stand_in(async_error)

    def leave():
        with ctx as c:
            assert c is ctx
            if error is not None:
                raise error

    if error is None:
        leave()
    else:
        with pytest.raises(type(error)) as info:
            leave()
        assert info.value is error  # the original error, not close()'s
    assert ctx.ended == [ended]


def test_unreadable_state_closes():
    """async_error() itself failing: close() as before (it says what is wrong)."""
    from nccl_dcp.context import leaves_by_abort
    unreadable = stand_in(async_raises=True)
    assert not leaves_by_abort(unreadable, RuntimeError("x"))
    unreadable._h = None  # not a real context: nothing to close
    closed = stand_in(POISONED)
    closed._h = None  # closed already: nothing to abort, close() is a no-op
    assert not leaves_by_abort(closed, RuntimeError("x"))
    assert leaves_by_abort(closed, REMOTE)  # the error alone says a peer failed
