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
    _text: IncrementalText | None = None  # the decoded text, kept for stop strings
    _cut: str | None = None  # the text before the stop string that ended it

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
        if self._text is None:
            self._text = IncrementalText(self.params.stop)
        found = self._text.step(tokenizer, self.token_ids)
        if found is not None:
            self._cut, self.stop = found
        return found is not None

    def completion(self, tokenizer, finished_at: float) -> Completion:
        text = self._cut if self.stop is not None else tokenizer.decode(self.token_ids, skip_special_tokens=True)
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


class IncrementalText:
    """A generation's decoded text, grown one token at a time at a cost that does not grow with its length, and the
    stop strings searched in what each token changed (the one stop check's text).

    The text is the committed text (the decoding of the first ``commit`` tokens, never decoded again, kept in
    pieces) plus a short tail: the decoding of the tokens after ``commit``, read as the difference between the
    decodings of ``ids[context:]`` and ``ids[context:commit]`` so the tail starts as it does inside the whole text (a
    SentencePiece decoder strips the leading space of whatever it decodes first), as vLLM's and Hugging Face's
    incremental detokenizers read it. Tokens are committed only ``LOOKAHEAD`` tokens (and at least ``MIN_CHARS``
    characters) behind the newest, and only where the tail's decoding starts with theirs: a multi-byte character
    split across tokens (a "\ufffd" where its bytes are still missing) or a clean-up rule that joins text across the
    boundary (``" ."`` -> ``"."``, at most five characters) never straddles a commit. Wherever the difference is not a
    clean extension the whole text is decoded again (correct, and rare). ``tests/test_decoding.py`` holds it to the
    full decode of every prefix on the real tokenizers.
    """

    LOOKAHEAD = 8
    CONTEXT = 4
    MIN_CHARS = 8

    def __init__(self, stops: tuple[str, ...]):
        self.stops = stops
        self.longest = max(map(len, stops))
        self._parts: list[str] = []  # the committed text, in pieces (joined only when asked for: no O(n) copies)
        self._committed_len = 0
        self._committed_end = ""  # its last characters, where a stop string may begin
        self.commit = 0
        self.tail = ""
        self._before: tuple[int, str] | None = None  # (context start, decoding of ids[context:commit])

    def step(self, tokenizer, ids: list[int]) -> tuple[str, str] | None:
        """Take ``ids`` (the previous ids and one more); return ``(text before the stop, stop)`` when a stop string
        appears, else None."""
        tail = self._decode_tail(tokenizer, ids, len(ids))
        if tail is None:  # the tail is not a clean extension: decode everything again
            self._parts, self._committed_len, self._committed_end, self.commit, self._before = [], 0, "", 0, None
            tail = _decode(tokenizer, ids)
        same = len(_common_prefix(self.tail, tail))  # characters of the tail that did not change
        committed = self._committed_len
        start = max(0, committed + same - self.longest + 1)  # everything before was searched unchanged
        offset = min(start, committed)  # within the committed text's last longest - 1 characters
        window = self._committed_end[len(self._committed_end) - (committed - offset):] + tail
        hits = [(i, s) for i, s in ((window.find(s, start - offset), s) for s in self.stops) if i >= 0]
        self.tail = tail
        if hits:
            cut, stop = min(hits)
            return "".join(self._parts)[:offset] + window[:cut], stop
        self._advance(tokenizer, ids)
        return None

    def text(self) -> str:
        return "".join(self._parts) + self.tail

    def _advance(self, tokenizer, ids: list[int]) -> None:
        """Commit the tail's tokens up to ``LOOKAHEAD`` behind the newest, where that is safe."""
        end = len(ids) - self.LOOKAHEAD
        if end - self.commit < self.LOOKAHEAD:
            return
        head = self._decode_tail(tokenizer, ids, end)
        if (head is None or not self.tail.startswith(head) or head.endswith("\ufffd")
                or len(self.tail) - len(head) < self.MIN_CHARS):
            return
        self._parts.append(head)
        self._committed_len += len(head)
        self._committed_end = (self._committed_end + head)[-self.longest:]
        self.tail = self.tail[len(head):]
        self.commit, self._before = end, None

    def _decode_tail(self, tokenizer, ids: list[int], end: int) -> str | None:
        """The text of ``ids[commit:end]`` as it reads inside the whole text; None where that is not a clean
        extension of the committed text."""
        if self.commit == 0:
            return _decode(tokenizer, ids[:end])
        if self._before is None:
            context = max(0, self.commit - self.CONTEXT)
            before = _decode(tokenizer, ids[context:self.commit])
            while context > 0 and len(before) < self.MIN_CHARS and self.commit - context < 16 * self.CONTEXT:
                context = max(0, context - self.CONTEXT)  # special tokens decode to nothing: read further back
                before = _decode(tokenizer, ids[context:self.commit])
            self._before = (context, before)
        context, before = self._before
        return self._extension(_decode(tokenizer, ids[context:end]), before)

    @staticmethod
    def _extension(both: str, before: str) -> str | None:
        return both[len(before):] if both.startswith(before) and not before.endswith("\ufffd") else None


def _decode(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=True)


def _common_prefix(a: str, b: str) -> str:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return a[:i]
