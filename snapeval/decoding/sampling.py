"""Per-request token choice: greedy argmax, or temperature / top-k / top-p sampling from the request's own stream.

A sampled request draws its ``j``-th token (``j = 0`` for the token chosen from the prefill's logits) by inverting
the cumulative distribution of its filtered softmax at one uniform number ``U`` in (0, 1): the token whose interval
of the cumulative probabilities (most likely first) holds ``U``, which draws each token with its probability (the
textbook inverse-transform method, what ``torch.multinomial`` does with its own generator). ``U`` is a counter-based
hash of (the request's seed, ``j``) (SplitMix64's finaliser), not the state of a generator: the draw depends on
nothing but the request, so sampled tokens are the same alone or in any batch, on any engine row, across runs, and a
whole batch draws in one set of tensor operations with the seeds and counters as tensors. That is what lets the
engine sample inside its captured CUDA graph (:class:`SlotSampler`): no host work per row, no generator state
outside the graph.
"""
from __future__ import annotations

import torch

from snapeval.decoding.requests import SampleStream, SamplingParams

#: SplitMix64's constants (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014), as
#: signed 64-bit integers (torch's int64 arithmetic wraps).
_GOLDEN = 0x9E3779B97F4A7C15 - 2**64
_MIX1 = 0xBF58476D1CE4E5B9 - 2**64
_MIX2 = 0x94D049BB133111EB - 2**64
_TOKEN_STRIDE = 0xD1B54A32D192ED03 - 2**64  # spreads (seed, token index) pairs before the vocabulary index is added


def request_stream(params: SamplingParams, base_seed: int, index: int) -> SampleStream | None:
    """A sampled request's stream, seeded by ``params.seed`` or else ``base_seed + index`` (so sampled tokens do not
    depend on which requests share a batch); ``None`` for greedy requests."""
    if not params.do_sample:
        return None
    return SampleStream(params.seed if params.seed is not None else base_seed + index)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 ``x`` (torch's ``>>`` on a signed tensor keeps the sign)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def uniform_noise(seeds: torch.Tensor, drawn: torch.Tensor, count: int = 1) -> torch.Tensor:
    """``U`` ``[R, count]`` float64 in (0, 1): SplitMix64's finaliser of ``seed * golden + drawn * stride + i`` per
    row (``seeds``, ``drawn``: ``[R]`` int64; ``i < count``), its top 53 bits as a fraction offset by half a unit
    (never 0 or 1)."""
    i = torch.arange(count, device=seeds.device, dtype=torch.long)
    z = (seeds[:, None] * _GOLDEN + drawn[:, None] * _TOKEN_STRIDE) + i[None, :] + _GOLDEN
    z = (z ^ _shift_right(z, 30)) * _MIX1
    z = (z ^ _shift_right(z, 27)) * _MIX2
    z = z ^ _shift_right(z, 31)
    return (_shift_right(z, 11).double() + 0.5) / 2.0**53


#: The most likely tokens a draw is read from when they hold everything top-k / top-p keeps (a partial top-k of the
#: vocabulary instead of a sort of all of it: :func:`choose`); a draw whose kept set does not fit sorts the whole row.
CANDIDATES = 1024


def _descending(scaled: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``count`` largest of each row of ``scaled`` ``[R, V]`` and their tokens, most likely first, equal values in
    token order (a stable order: the same on every device and for every ``count``)."""
    if count >= scaled.shape[-1]:
        return torch.sort(scaled, dim=-1, descending=True, stable=True)
    values, order = torch.topk(scaled, count, dim=-1)
    order, by_token = order.sort(dim=-1)
    values, by_value = values.gather(1, by_token).sort(dim=-1, descending=True, stable=True)
    return values, order.gather(1, by_value)


def filter_rows(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``logits`` ``[R, V]`` scaled by their ``temperature`` ``[R]``, then top-k (``top_k`` ``[R]``; 0: off)
    keeping every token at least as likely as the k-th, then top-p (``top_p`` ``[R]``; 1: off) keeping the smallest
    set of most likely tokens whose probability reaches it (the most likely always survives), as Hugging Face's
    ``TopKLogitsWarper`` and ``TopPLogitsWarper`` do. Returns the rows in descending order (equal values in token
    order), the dropped tokens at -inf, and the order: ``sorted[r, i]`` is token ``order[r, i]`` (``[R, V]``; over
    the most likely tokens only: :func:`filter_candidates`)."""
    filtered, order, _ = filter_candidates(logits, temperature, top_k, top_p)
    return filtered, order


def filter_candidates(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                      candidates: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`filter_rows`, or over the ``candidates`` most likely tokens only (``[R, candidates]``, probabilities
    still over the whole row), and ``fits`` ``[R]``: whether the candidates hold every token the whole row keeps (its
    last candidate dropped, and the kept tokens strictly more likely than it, so that no token outside the
    candidates, at most as likely, can be kept). Always True over the whole vocabulary."""
    scaled = logits.float() / temperature[:, None]
    vocab = scaled.shape[-1]
    count = vocab if candidates is None else min(candidates, vocab)
    raw, order = _descending(scaled, count)
    k = torch.where((top_k > 0) & (top_k < vocab), top_k, torch.full_like(top_k, vocab))
    kth = torch.where(k < vocab, raw.gather(1, (k.clamp(max=count) - 1)[:, None]).squeeze(1),
                      torch.full_like(raw[:, 0], float("-inf")))[:, None]
    ordered = raw.masked_fill(raw < kth, float("-inf"))
    if count == vocab:
        probs = ordered.softmax(-1)
    else:  # normalised over every token top-k keeps, not only the candidates
        probs = (ordered - scaled.masked_fill(scaled < kth, float("-inf")).logsumexp(-1, keepdim=True)).exp()
    drop = (probs.cumsum(-1) - probs >= top_p[:, None]) & (top_p[:, None] < 1.0)  # mass before it already enough
    filtered = ordered.masked_fill(drop, float("-inf"))
    if count == vocab:
        return filtered, order, torch.ones(raw.shape[0], dtype=torch.bool, device=raw.device)
    last_kept = (~torch.isinf(filtered)).sum(-1, keepdim=True) - 1
    fits = (last_kept[:, 0] < count - 1) & (raw.gather(1, last_kept)[:, 0] > raw[:, -1])
    return filtered, order, fits


def sample_rows(logits: torch.Tensor, do_sample: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                top_p: torch.Tensor, seeds: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    """The next token ``[R]`` of every row of ``logits`` ``[R, V]``: the argmax where ``do_sample`` ``[R]`` is False,
    else the inverse-transform draw from the row's filtered softmax (:func:`filter_rows`; the dropped tokens are a
    suffix of the sorted row, with no probability) at the uniform of its ``seeds`` and ``drawn``
    (:func:`uniform_noise`). Pure tensor operations (no host synchronisation): a captured step runs it."""
    greedy = logits.argmax(-1)
    ordered, order = filter_rows(logits, temperature, top_k, top_p)
    return torch.where(do_sample, _draw(ordered, order, seeds, drawn), greedy)


def _draw(ordered: torch.Tensor, order: torch.Tensor, seeds: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    cumulative = ordered.softmax(-1).double().cumsum(-1)
    target = uniform_noise(seeds, drawn) * cumulative[:, -1:]
    pick = torch.searchsorted(cumulative, target, right=True).clamp(max=ordered.shape[-1] - 1)
    return order.gather(1, pick)[:, 0]


def sampling_bytes_per_row(vocab: int, candidates: int | None = None) -> int:
    """Bytes a sampled row's step allocates at its peak beside the logits (:func:`sample_rows` over ``candidates``
    or the whole vocabulary): the scaled row and its float copies (4 bytes a token each), the order (8) and the
    float64 cumulative (8), live together in :func:`filter_rows` and :func:`_draw` (``tests/test_sampling.py``
    measures the peak of every tensor the step allocates and holds this to it)."""
    count = vocab if candidates is None else min(candidates, vocab)
    return 4 * vocab * 2 + count * (4 * 4 + 8 * 2 + 8 * 2 + 1)


def filtered_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """``logits`` ``[V]`` -> float32 logits scaled by the temperature, with tokens outside top-k / top-p at -inf
    (:func:`filter_rows` of one row, in vocabulary order)."""
    ordered, order = filter_rows(logits[None], *_row_settings(params, logits.device)[1:4])
    return torch.empty_like(ordered).scatter_(1, order, ordered)[0]


def _row_settings(params: SamplingParams, device) -> tuple[torch.Tensor, ...]:
    """One request's ``do_sample``, ``temperature``, ``top_k``, ``top_p`` as ``[1]`` tensors."""
    return (torch.tensor([params.do_sample], device=device), torch.tensor([params.temperature], device=device),
            torch.tensor([params.top_k], device=device), torch.tensor([params.top_p], device=device))


def draw_rows(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
              seeds: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    """The draw of every row of ``logits`` ``[R, V]`` (every row samples; settings ``[R]``), as :func:`sample_rows`
    draws it, reading only the :data:`CANDIDATES` most likely tokens of each row whose top-k / top-p keeps fewer (a
    partial top-k, no sort of the vocabulary) and sorting the whole row of the others. Eager only: it reads on the host
    which rows fit (a captured or compiled step calls :func:`sample_rows`)."""
    confined = (top_k > 0) | (top_p < 1.0)  # rows whose kept set may fit the candidates
    if bool(confined.all()):  # the common case (one row of the eager loop, a call's rows alike): no row gathered
        ordered, order, fits = filter_candidates(logits, temperature, top_k, top_p, candidates=CANDIDATES)
        if bool(fits.all()):
            return _draw(ordered, order, seeds, drawn)
    tokens = torch.empty(logits.shape[0], dtype=torch.long, device=logits.device)
    narrow = confined.nonzero()[:, 0]
    whole = torch.ones(logits.shape[0], dtype=torch.bool, device=logits.device)
    if len(narrow):
        ordered, order, fits = filter_candidates(logits[narrow], temperature[narrow], top_k[narrow], top_p[narrow],
                                                 candidates=CANDIDATES)
        if bool(fits.any()):
            fit = fits.nonzero()[:, 0]
            rows = narrow[fit]
            tokens[rows] = _draw(ordered[fit], order[fit], seeds[rows], drawn[rows])
            whole[rows] = False
    rest = whole.nonzero()[:, 0]
    if len(rest):
        ordered, order = filter_rows(logits[rest], temperature[rest], top_k[rest], top_p[rest])
        tokens[rest] = _draw(ordered, order, seeds[rest], drawn[rest])
    return tokens


def choose(logits: torch.Tensor, params: SamplingParams, stream: SampleStream | None) -> int:
    """The next token of one request from its ``[V]`` logits (its stream advances by one draw when it samples):
    :func:`draw_rows` of one row, so a request draws the same token alone as in any batch (:func:`sample_rows`)."""
    if not params.do_sample:
        return int(logits.argmax())
    device = logits.device
    settings = _row_settings(params, device)
    seeds = torch.tensor([stream.seed], device=device)
    drawn = torch.tensor([stream.drawn], device=device)
    stream.drawn += 1
    return int(draw_rows(logits[None], *settings[1:4], seeds, drawn)[0])


class SlotSampler:
    """The sampling settings of an engine's ``rows`` slots as static tensors (``do_sample``, ``temperature``,
    ``top_k``, ``top_p``, ``seeds``, ``drawn``: ``[rows]``), written in place when a request takes a slot, read by
    :meth:`choose` inside the (captured or compiled) step, whose ``drawn`` counters advance on the device; an eager
    step calls :meth:`choose_eager`, which draws only for the slots whose request samples (kept on the host too)."""

    def __init__(self, rows: int, device):
        self.do_sample = torch.zeros(rows, dtype=torch.bool, device=device)
        self.temperature = torch.ones(rows, dtype=torch.float32, device=device)
        self.top_k = torch.zeros(rows, dtype=torch.long, device=device)
        self.top_p = torch.ones(rows, dtype=torch.float32, device=device)
        self.seeds = torch.zeros(rows, dtype=torch.long, device=device)
        self.drawn = torch.zeros(rows, dtype=torch.long, device=device)
        self.sampling_slots: set[int] = set()  # slots whose current request samples (host side, for choose_eager)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.do_sample, self.temperature, self.top_k, self.top_p, self.seeds, self.drawn

    def assign(self, slot: int, params: SamplingParams, stream: SampleStream | None) -> None:
        """Slot ``slot`` now decodes a request of ``params`` whose stream has drawn ``stream.drawn`` tokens."""
        self.do_sample[slot] = params.do_sample
        self.temperature[slot] = params.temperature if params.do_sample else 1.0
        self.top_k[slot] = params.top_k
        self.top_p[slot] = params.top_p
        self.seeds[slot] = stream.seed if stream is not None else 0
        self.drawn[slot] = stream.drawn if stream is not None else 0
        (self.sampling_slots.add if params.do_sample else self.sampling_slots.discard)(slot)

    def park(self, slot: int) -> None:
        """Slot ``slot`` went idle: its output is ignored, so :meth:`choose_eager` no longer draws for it."""
        self.sampling_slots.discard(slot)

    def choose(self, logits: torch.Tensor) -> torch.Tensor:
        """Every slot's next token ``[rows]`` from ``logits`` ``[rows, V]``; each slot's counter advances. Pure tensor
        operations: what a captured or compiled step runs."""
        tokens = sample_rows(logits, *self.tensors())
        self.drawn.add_(1)
        return tokens

    def choose_eager(self, logits: torch.Tensor) -> torch.Tensor:
        """:meth:`choose` with the same token for every slot whose request samples (the argmax for the others, idle
        ones included), drawn only for those (:func:`draw_rows`), not for every row of the engine."""
        tokens = logits.argmax(-1)
        if self.sampling_slots:
            rows = torch.tensor(sorted(self.sampling_slots), device=logits.device)
            tokens[rows] = draw_rows(logits[rows], self.temperature[rows], self.top_k[rows], self.top_p[rows],
                                     self.seeds[rows], self.drawn[rows])
        self.drawn.add_(1)
        return tokens
