"""A catalog's keys in this process, on its device, answering a mixture's dense heads
(models/heads.py): every field's keys, rows [offset, offset + N) of the catalog (all of it, or
one shard's rows). The served index of one process holds one (service/engine/served_index.py);
each shard of a cluster holds its slice (service/cluster/shards/shard.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from models import cpu_blas
from models.heads import DenseHead
from models.local_heads import LocalDenseHeads

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DenseHeadSpec = Sequence[tuple[str, float]]  # a query's dense heads: (field, scale) each


def key_dtype_for(device: torch.device, preference: str) -> torch.dtype:
    """`auto`: float32 on every device. Half-precision keys halve the bytes streamed and held,
    but rounding the keys moves the weights past 1e-3 and changes some top 10s of the queries
    readers type (benchmarks/key_dtype.py, docs/configuration.md): an option, not the default
    of a core whose weights are exact."""
    if preference == "auto":
        return torch.float32
    return _DTYPES[preference]


def per_head(q: Tensor, heads: int) -> Tensor:
    """(Hd, B, d): a search's one query block q (B, d) for each of `heads` dense heads, or q
    itself when it already has one block per head (books as queries: each head its own key)."""
    if q.dim() == 3:
        if q.shape[0] != heads:
            raise ValueError(f"{q.shape[0]} query blocks for {heads} dense heads")
        return q
    return q.expand(heads, *q.shape)


class LocalKeys:
    """Every field's keys on this process's device, rows [offset, offset + N) of a catalog."""

    def __init__(
        self,
        keys: dict[str, np.ndarray],
        *,
        device: torch.device,
        key_dtype: str = "auto",
        chunk_size: int | None = None,
        offset: int = 0,
    ):
        dtype = key_dtype_for(device, key_dtype)
        # Stored (d, N) and used through their (N, d) transpose view: q Kᵀ then streams memory
        # in order, 1.8x faster at B = 1 on the CPU than row-major keys. The store loads them in
        # that layout, so on the CPU in fp32 this copies nothing.
        self.by_field = {
            f: torch.from_numpy(k).to(device, dtype).T.contiguous().T  # (N, d)
            for f, k in keys.items()
        }
        self.device, self.dtype = device, dtype
        self.chunk_size, self.offset = chunk_size, offset
        self.size = len(next(iter(keys.values()))) if keys else 0
        if device.type == "cpu" and dtype == torch.float32:
            cpu_blas.choices()  # measured once per process: at start-up, not in a first search

    @property
    def dim(self) -> int:
        return int(next(iter(self.by_field.values())).shape[1])

    def __str__(self) -> str:
        """What a start-up log says of them: fields, width, dtype and device."""
        dim = self.dim if self.size else 0
        dtype = str(self.dtype).removeprefix("torch.")
        fields = ", ".join(self.by_field)
        return f"{len(self.by_field)} keys ({fields}) d={dim} {dtype} on {self.device}"

    def dense_heads(
        self,
        q: Tensor,
        heads: DenseHeadSpec,
        *,
        filters: Sequence[object] = (),
        mask: Tensor | None,
    ) -> LocalDenseHeads:
        """`mask` says which rows the queries attend to here; the filters it came from are for
        a store that builds its own masks (a cluster's shards)."""
        del filters
        qs = per_head(q.to(self.device), len(heads))
        return LocalDenseHeads(
            [
                DenseHead(qs[h], self.by_field[field], scale)
                for h, (field, scale) in enumerate(heads)
            ],
            size=self.size,
            mask=mask,
            chunk_size=self.chunk_size,
            offset=self.offset,
        )

    def unanswered(self) -> str | None:
        """None: keys in this process always answer."""
        return None

    def key_rows(self, rows: Sequence[int], fields: Sequence[str]) -> Tensor:
        index = torch.tensor([r - self.offset for r in rows], dtype=torch.long, device=self.device)
        return torch.stack([self.by_field[f][index].float().cpu() for f in fields])

    def host(self) -> dict[str, np.ndarray]:
        """The keys on the host in float32: views of the tensors themselves for fp32 keys on the
        CPU ((N, d) arrays in column-major order), a copy otherwise."""
        return {f: k.to("cpu", torch.float32).numpy() for f, k in self.by_field.items()}
