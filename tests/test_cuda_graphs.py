"""`attend` replayed from CUDA graphs (models/cuda_graphs.py) answers what it answers eagerly, and
a replay's answer is the caller's own. The packing of a graph's outputs runs anywhere; the
graphs themselves need a GPU and skip without one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models import cuda_graphs
from models.attention import attend

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


def test_outputs_pack_into_one_buffer_and_back() -> None:
    """Every dtype at an offset its own size divides (an odd count of float32 between int64s
    would misalign the next), None kept in its place."""
    outs: list[torch.Tensor | None] = [
        torch.arange(6, dtype=torch.int64).view(2, 3),
        torch.rand(3, 3),  # 36 bytes
        None,
        torch.rand(2, dtype=torch.float64),
        torch.tensor([True, False, True]),
        torch.rand(5, 2).T,  # not contiguous
    ]
    packed, layout = cuda_graphs.pack(outs)
    assert packed.dtype == torch.uint8 and packed.dim() == 1
    back = cuda_graphs.unpack(packed.clone(), layout)
    assert back[2] is None
    for got, want in zip(back, outs, strict=True):
        if want is None:
            continue
        assert got is not None and got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)
        assert got.data_ptr() % got.element_size() == 0


def test_cpu_keys_are_never_graphed() -> None:
    assert not cuda_graphs.applies(torch.zeros(4, 8), B=1, C=64)


def unit(n: int, d: int, seed: int) -> torch.Tensor:
    """(n, d) unit rows on the GPU."""
    x = F.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed)), dim=-1)
    return x.cuda()


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("masked", [None, "keys", "rows"])
def test_replays_answer_as_eager_calls(dtype: torch.dtype, masked: str | None) -> None:
    cuda_graphs.clear()
    B, N = 3, 20_000
    keys = unit(N, 64, seed=1).to(dtype).T.contiguous().T  # the served (d, N) layout
    values = unit(N, 16, seed=2).to(dtype)

    def mask_for(seed: int) -> torch.Tensor | None:
        """Each call's own mask, of one shape: the graph's static copy takes each in turn."""
        g = torch.Generator().manual_seed(seed)
        if masked is None:
            return None
        return (torch.rand(N if masked == "keys" else (B, N), generator=g) > 0.5).cuda()

    for v in (None, values):
        answers = []
        for seed in (4, 5, 6, 4):  # 1st eager, 2nd captured, then replays; q 4 twice
            q, mask = unit(B, 64, seed=seed), mask_for(seed)
            graphed = attend(q, keys, v, k=10, scale=20.0, mask=mask, chunk_size=8_192)
            cuda_graphs.set_enabled(False)
            try:
                eager = attend(q, keys, v, k=10, scale=20.0, mask=mask, chunk_size=8_192)
            finally:
                cuda_graphs.set_enabled(True)
            for field in ("indices", "scores", "weights", "logsumexp", "matched", "output"):
                a, b = getattr(graphed, field), getattr(eager, field)
                assert (a is None) == (b is None)
                if a is not None:
                    assert torch.equal(a, b), field
            answers.append(graphed)
        assert cuda_graphs._graphs, "the third call of a shape replays a graph"
        # the first answer is the caller's: later replays did not write over it
        assert torch.equal(answers[0].indices, answers[3].indices)
        assert not torch.equal(answers[0].indices, answers[1].indices)


@needs_cuda
def test_raw_scores_and_large_calls_run_eagerly() -> None:
    cuda_graphs.clear()
    keys = unit(4_096, 32, seed=7)
    q = unit(2, 32, seed=8)
    kept = torch.empty(2, 4_096, device="cuda")
    for _ in range(3):
        attend(q, keys, k=5, scale=20.0, scores_out=kept)
    assert not cuda_graphs._graphs
    assert not cuda_graphs.applies(keys, B=2, C=cuda_graphs.MAX_LOGITS)
