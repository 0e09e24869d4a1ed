"""lm-eval hooks of the synthetic long-context tasks (implemented in snapeval.tasks.lm_eval_hooks)."""
from snapeval.tasks.lm_eval_hooks import (  # noqa: F401
    aggregate_present,
    kv_needle_dataset,
    kv_needle_multi_dataset,
    passkey_dataset,
    synthetic_process_results,
    variable_tracking_dataset,
)
