"""One decode step, one loop: what every generation path of snapeval runs.

:func:`~snapeval.decoding.step.prefill` and :func:`~snapeval.decoding.step.decode_step` are the two forward passes
(gpt-fast's ``prefill`` and ``decode_one_token``); :func:`~snapeval.decoding.step.stop_token_ids` is the one set of
tokens that ends a generation; :class:`~snapeval.decoding.requests.Request` holds a request while it decodes and is
the one stop check; :func:`~snapeval.decoding.sampling.choose` picks each token (greedy, or sampled from the request's
own stream of draws); :func:`~snapeval.decoding.loop.decode` is the loop of a static batch. :func:`snapeval.generate`, the
branches of a shared prefill and speculative prefill's target decode with :func:`decode`; the continuous-batching
engine steps its slots with :func:`decode_step` and the same stop check.
"""
from __future__ import annotations

from snapeval.decoding.loop import decode
from snapeval.decoding.requests import FINISH_REASONS, Completion, Request, SamplingParams
from snapeval.decoding.sampling import SampleStream, SlotSampler, choose, filtered_logits, request_stream
from snapeval.decoding.step import decode_step, pad_token_id, prefill, stop_token_ids

__all__ = ["FINISH_REASONS", "Completion", "Request", "SamplingParams", "choose", "decode", "decode_step",
           "filtered_logits", "pad_token_id", "prefill", "request_stream", "SampleStream", "SlotSampler",
           "stop_token_ids"]
