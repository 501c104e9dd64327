"""The one ranking function: a list of head queries, their weights and scales → the exact
mixture. A typed search (service/engine/query_ranking.py) and books as the query
(service/engine/book_ranking.py) each say what their components are; this turns them into π
(after the heads without evidence abstain: service/engine/mixing.py) and the exact top k
(`models.mixture.mix_topk`, over the keys wherever they are). `run_mixture` answers the
mixture's asks from the dense heads: the engine calls down into the keys' holder (models, or a
cluster's shards) and into the mixture, and neither calls up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from indexer.filters import Filters
from models.heads import DenseHeads, ScoredHead
from models.mixture import Answer, MixSteps, Mixture, ScoresAsk, TopAsk, mix_topk
from models.rank_fusion import fuse_ranks
from service.config.head_weights import Fusion
from service.engine.mixing import Mixed
from service.engine.served_index import ServedIndex


@dataclass(frozen=True)
class Component:
    """One head asked by every query of a batch: a dense head with its queries (B, d) over a
    field's keys, or a scored head with its logits (B, N) and, per query, whether it has
    evidence (service/engine/scored_heads.py)."""

    head: str
    scale: float
    asked: Sequence[float]  # (B,) the weight each query asks of it (0: not asked)
    query: Tensor | None = None  # (B, d), a dense head's
    scored: ScoredHead | None = None  # a scored head's
    evidence: Sequence[bool] | None = None  # (B,) a scored head's; a dense head always has it

    @property
    def dense(self) -> bool:
        return self.query is not None


@dataclass(frozen=True)
class Ranked:
    """What `rank` made of the components: π (the kept components') and the top k."""

    mixed: Mixed
    components: list[Component]  # the kept ones, the columns of mixed.pi and of mix's parts
    mix: Mixture


def rank(
    index: ServedIndex,
    components: Sequence[Component],
    *,
    k: int,
    filters: Sequence[Filters],
    mask: Tensor | None,
    entropy: bool = False,
    fusion: Fusion = "mixture",
    log_prior: Tensor | None = None,
) -> Ranked:
    """The exact top k of each query of the batch, the dense components first: by
    Σ_c π_c softmax(scale_c · logits_c) (`fusion="mixture"`, models/mixture.py), or by the
    weighted reciprocal ranks of each component's softmax (`"rank"`, models/rank_fusion.py),
    there times the books' prior ρ (`log_prior` (N,): log ρ); `mask` is `filters`' mask."""
    if log_prior is not None and fusion != "rank":
        raise ValueError("a prior over the books weighs the rank fusion only")
    if any(c.dense for c in components[sum(c.dense for c in components) :]):
        raise ValueError("the dense components come first")
    B = len(filters)
    asked = torch.tensor([list(c.asked) for c in components], dtype=torch.float64).T  # (B, C)
    has = torch.tensor(
        [[True] * B if c.dense else list(c.evidence or [False] * B) for c in components]
    ).T  # (B, C)
    mixed = Mixed.of(asked.reshape(B, -1), has.reshape(B, -1), [c.head for c in components])
    kept = [components[c] for c in mixed.columns]
    queries = [c.query for c in kept if c.query is not None]
    if not queries:
        q = torch.empty(0, B, index.dim)
    elif all(x is queries[0] for x in queries):
        q = queries[0].to(index.device)  # (B, d): one query for every dense head
    else:
        q = torch.stack(queries).to(index.device)  # (Cd, B, d)
    dense = index.keys.dense_heads(
        q, [(c.head, c.scale) for c in kept if c.dense], filters=filters, mask=mask
    )
    scored = [c.scored for c in kept if c.scored is not None]
    if fusion == "rank":
        steps = fuse_ranks(
            dense.scales,
            dense.size,
            scored,
            mixed.pi,
            k=k,
            mask=mask,
            entropy=entropy,
            log_prior=log_prior,
        )
    else:
        steps = mix_topk(
            dense.scales, dense.size, scored, mixed.pi, k=k, mask=mask, entropy=entropy
        )
    return Ranked(mixed, kept, run_mixture(dense, steps))


def run_mixture(dense: DenseHeads, steps: MixSteps) -> Mixture:
    """The mixture `steps` computes, each of its asks answered by `dense`, wherever its keys
    are: the engine calls down into both, and neither calls up."""
    answer: Answer | None = None  # a generator starts on send(None)
    part: tuple[Tensor, DenseHeads] | None = None  # the heads of a round's queries
    while True:
        try:
            ask = steps.send(answer)
        except StopIteration as done:  # only the generator's own end: not one from `dense`
            return cast(Mixture, done.value)
        if isinstance(ask, TopAsk | ScoresAsk):
            heads = dense
            if ask.rows is not None:  # one round's queries: its top and scores ask the same
                if part is None or part[0] is not ask.rows:
                    part = (ask.rows, dense.rows(ask.rows))
                heads = part[1]
            answer = heads.top(ask.k) if isinstance(ask, TopAsk) else heads.scores(ask.cand)
        else:
            answer = dense.sweep(ask.pi, ask.lse, ask.cand, ask.scored)
