"""The per-batch arrays kept across batches (models/spare_arrays.py): one is lent again only
when nothing holds a view of it, so no two holders ever share memory."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from models import spare_arrays

BIG = (spare_arrays.KEPT_FROM // 4, 2)  # float32: twice the size kept arrays start at


@pytest.fixture(autouse=True)
def _none_kept() -> Iterator[None]:
    spare_arrays.release()
    yield
    spare_arrays.release()


def test_an_array_no_one_holds_is_lent_again() -> None:
    a = spare_arrays.empty("t", BIG, np.float32)
    where = a.ctypes.data
    del a
    b = spare_arrays.empty("t", BIG, np.float32)
    assert b.ctypes.data == where and b.shape == BIG and b.flags.c_contiguous
    del b
    smaller = spare_arrays.empty("t", (BIG[0], 1), np.int64)  # any shape and dtype that fits
    assert smaller.ctypes.data == where and smaller.dtype == np.int64


def test_an_array_held_by_a_view_or_a_tensor_is_not_lent_twice() -> None:
    a = spare_arrays.empty("t", BIG, np.float32)
    held = [a[1:], torch.from_numpy(a)]  # each keeps the kept array in use
    del a
    for h in held:
        b = spare_arrays.empty("t", BIG, np.float32)
        assert not np.shares_memory(b, h.numpy() if isinstance(h, torch.Tensor) else h)
        del b
        held = [x for x in held if x is not h]
        del h
    c = spare_arrays.empty("t", BIG, np.float32)  # none held now: the kept one again
    d = spare_arrays.empty("t", BIG, np.float32)  # c holds it: a fresh one
    assert not np.shares_memory(c, d)


def test_purposes_do_not_share_and_a_larger_need_replaces_the_kept_one() -> None:
    a = spare_arrays.empty("t", BIG, np.float32)
    b = spare_arrays.empty("u", BIG, np.float32)
    assert not np.shares_memory(a, b)
    del a
    larger = spare_arrays.empty("t", (BIG[0], 4), np.float32)
    where = larger.ctypes.data
    del larger
    assert spare_arrays.empty("t", (BIG[0], 4), np.float32).ctypes.data == where


def test_small_arrays_are_plain_ones() -> None:
    a = spare_arrays.empty("t", (16,), np.float32)
    where = a.ctypes.data
    b = spare_arrays.empty("t", (16,), np.float32)
    assert b.ctypes.data != where


def test_two_batches_in_flight_keep_their_own_raw_scores() -> None:
    """The dense heads' kept raw scores (models/local_heads.py) come from the kept array: a
    second batch ranked while the first's heads are alive gets memory of its own, and the
    first's scores stay its own; once the first is gone its array serves the next."""
    from models.heads import DenseHead
    from models.local_heads import LocalDenseHeads

    g = torch.Generator().manual_seed(3)
    B, N, d = 4, 300_000, 8  # (B, N) float32 past KEPT_FROM
    assert B * N * 4 >= spare_arrays.KEPT_FROM
    keys = torch.randn(N, d, generator=g)
    qa, qb = torch.randn(B, d, generator=g), torch.randn(B, d, generator=g)
    a = LocalDenseHeads([DenseHead(qa, keys, 1.0)], size=N)
    a.top(5)
    b = LocalDenseHeads([DenseHead(qb, keys, 1.0)], size=N)
    b.top(5)
    sa, sb = a._scores[0], b._scores[0]
    assert sa is not None and sb is not None
    assert not np.shares_memory(sa.numpy(), sb.numpy())
    torch.testing.assert_close(sa, qa @ keys.T, rtol=1e-4, atol=1e-4)
    where = sa.data_ptr()
    del a, sa
    c = LocalDenseHeads([DenseHead(qb, keys, 1.0)], size=N)
    c.top(5)
    assert c._scores[0] is not None and c._scores[0].data_ptr() == where


def test_a_swap_lets_the_kept_arrays_go() -> None:
    """After a swap (`release_freed_memory`) no array sized for the old generation is kept."""
    from service.engine.reloader import release_freed_memory

    a = spare_arrays.empty("t", BIG, np.float32)
    assert spare_arrays.kept_bytes() == a.nbytes
    del a
    release_freed_memory()
    assert spare_arrays.kept_bytes() == 0
