"""lm-eval hooks of the LiveCodeBench task (implemented in snapeval.tasks.lm_eval_hooks)."""
from snapeval.tasks.lm_eval_hooks import (  # noqa: F401
    livecodebench_dataset,
    livecodebench_doc_to_text,
    livecodebench_execute,
    livecodebench_process_results,
)
