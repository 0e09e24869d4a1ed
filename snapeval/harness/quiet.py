"""lm-eval's warnings that carry nothing for a snapeval run, dropped at their loggers (every other record passes).

- ``lm_eval.models.huggingface``: "`pretrained` model kwarg is not of type `str`" and "Passed an already-initialized
  model through `pretrained`": the ``snapstream`` model always hands lm-eval's Hugging Face model the loaded model
  (one process, no accelerate), so both would repeat for every cell of a sweep.
- ``lm_eval.api.task``: "<task>: Custom kwargs can be passed to `--metadata` ...", a hint for RULER's options that
  lm-eval prints for every task built from a custom dataset, which all of snapeval's are; their metadata is given
  by the sweep's YAML or ``--metadata`` and recorded with every result.
"""
from __future__ import annotations

import logging

#: logger name -> message prefixes (or fragments) dropped from it
SILENCED = {
    "lm_eval.models.huggingface": ("`pretrained` model kwarg is not of type `str`",
                                   "Passed an already-initialized model through `pretrained`"),
    "lm_eval.api.task": ("Custom kwargs can be passed to `--metadata`",),
}


class _Drop(logging.Filter):
    def __init__(self, fragments: tuple[str, ...]):
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(fragment in message for fragment in self.fragments)


def silence_lm_eval_noise() -> None:
    """Install the filters once (idempotent)."""
    for name, fragments in SILENCED.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Drop) for f in logger.filters):
            logger.addFilter(_Drop(fragments))
