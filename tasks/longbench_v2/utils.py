"""lm-eval hooks of the LongBench-v2 tasks (implemented in snapeval.tasks.lm_eval_hooks)."""
from snapeval.tasks.lm_eval_hooks import (  # noqa: F401
    aggregate_present,
    longbench_v2_cot_answer_prompt,
    longbench_v2_cot_dataset,
    longbench_v2_dataset,
    longbench_v2_doc_to_text,
    longbench_v2_process_results,
)
