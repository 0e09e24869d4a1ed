"""lm-eval hooks of the AIME 2024 tasks (implemented in snapeval.tasks.lm_eval_hooks)."""
from snapeval.tasks.lm_eval_hooks import (  # noqa: F401
    aime24_dataset,
    aime24_doc_to_text,
    aime24_process_results,
    all_samples,
)
