"""What goes into a generation (:class:`SamplingParams`), its state while it decodes (:class:`Request`: the one stop
check) and what comes out (:class:`Completion`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from snapeval.errors import SnapevalError, is_int

FINISH_REASONS = ("eos", "stop", "length")


def _bad(field_name: str, value, allowed: str) -> SnapevalError:
    return SnapevalError(f"SamplingParams.{field_name}={value!r} is invalid; allowed: {allowed}")


@dataclass
class SampleStream:
    """A sampled request's stream of draws (:func:`~snapeval.decoding.sampling.request_stream`): ``drawn`` tokens
    drawn so far from ``seed``."""

    seed: int
    drawn: int = 0


@dataclass(frozen=True)
class SamplingParams:
    """Per-request decoding settings (the fields of lm-eval's ``generate_until`` gen_kwargs).

    Attributes:
        max_new_tokens: generated tokens at most (the eos or stop token included). ``>= 1``.
        stop: stop strings; generation ends once the decoded text contains one, and the completion's text is cut
            just before it (lm-eval's ``until``). The tokenizer's eos tokens always stop.
        temperature, top_p, top_k: sampling filters, used only when ``do_sample``; ``top_k=0`` and ``top_p=1``
            disable their filter.
        do_sample: sample instead of greedy argmax.
        seed: seeds this request's own stream of draws (:func:`~snapeval.decoding.request_stream`), so sampled
            tokens do not depend on which requests share a batch. ``None``: the engine's seed plus the request's
            index in its ``generate`` call.
    """

    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    do_sample: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        if not is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise _bad("max_new_tokens", self.max_new_tokens, "an integer >= 1")
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        if not all(isinstance(s, str) and s for s in stop):
            raise _bad("stop", self.stop, "a list of non-empty strings")
        object.__setattr__(self, "stop", stop)
        if not isinstance(self.do_sample, bool):
            raise _bad("do_sample", self.do_sample, "True or False")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise _bad("temperature", self.temperature, "a number >= 0")
        if self.do_sample and self.temperature == 0:
            raise _bad("temperature", self.temperature, "a number > 0 when do_sample=True (use do_sample=False for greedy)")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise _bad("top_p", self.top_p, "a number in (0, 1]")
        if not is_int(self.top_k) or self.top_k < 0:
            raise _bad("top_k", self.top_k, "an integer >= 0 (0 disables it)")
        if self.seed is not None and (not is_int(self.seed)):
            raise _bad("seed", self.seed, "an integer or None")


@dataclass
class Completion:
    """One request's result. Times are seconds since the start of its generation call (an :meth:`Engine.generate`).

    ``token_ids`` are the generated tokens, the eos token or the token that completed a stop string included
    (as :func:`snapeval.generate` returns them); ``text`` is their decoding without special tokens, cut before the
    stop string.
    """

    index: int
    prompt_tokens: int
    token_ids: list[int]
    text: str
    finish_reason: str  # one of FINISH_REASONS
    stop: str | None = None  # the stop string that ended it
    slot: int = -1  # the slot it decoded in (-1: finished at its first token)
    admitted_at: float = 0.0  # prefill start (the time it waited in the queue)
    time_to_first_token: float = 0.0  # first token ready (queueing + prefill)
    finished_at: float = 0.0
    prefill_seconds: float = 0.0
    kv_bytes: int = 0  # KV-cache bytes its row held when it finished (all layers)

    @property
    def generated_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class Request:
    """One request while it decodes: its tokens so far and why it stopped (:meth:`check_stop`, the one stop check of
    every decode loop)."""

    index: int
    prompt: list[int]
    params: SamplingParams
    stream: SampleStream | None = None  # a sampled request's draws (snapeval.decoding.sampling)
    token_ids: list[int] = field(default_factory=list)
    slot: int = -1
    admitted_at: float = 0.0
    first_token_at: float = 0.0
    prefill_seconds: float = 0.0
    kv_bytes: int = 0
    finish_reason: str | None = None
    stop: str | None = None
    _text: str = ""
    _searched: int = 0  # characters of the text already searched for stop strings

    def check_stop(self, token: int, stops: frozenset[int], tokenizer) -> bool:
        """Append ``token``; return True (and set :attr:`finish_reason`) when the request is done."""
        self.token_ids.append(token)
        if token in stops:
            self.finish_reason = "eos"
        elif self.params.stop and self._find_stop(tokenizer):
            self.finish_reason = "stop"
        elif len(self.token_ids) >= self.params.max_new_tokens:
            self.finish_reason = "length"
        return self.finish_reason is not None

    def _find_stop(self, tokenizer) -> bool:
        self._text = tokenizer.decode(self.token_ids, skip_special_tokens=True)
        start = max(0, self._searched - max(map(len, self.params.stop)) + 1)
        hits = [(self._text.find(s, start), s) for s in self.params.stop]
        hits = [(i, s) for i, s in hits if i >= 0]
        self._searched = len(self._text)
        if hits:
            cut, self.stop = min(hits)
            self._text = self._text[:cut]
        return bool(hits)

    def completion(self, tokenizer, finished_at: float) -> Completion:
        text = self._text if self.stop is not None else tokenizer.decode(self.token_ids, skip_special_tokens=True)
        return Completion(
            index=self.index,
            prompt_tokens=len(self.prompt),
            token_ids=list(self.token_ids),
            text=text,
            finish_reason=self.finish_reason,
            stop=self.stop,
            slot=self.slot,
            admitted_at=self.admitted_at,
            time_to_first_token=self.first_token_at,
            finished_at=finished_at,
            prefill_seconds=self.prefill_seconds,
            kv_bytes=self.kv_bytes,
        )
