"""The task-family contract, looped over every family found under ``snapeval/tasks/`` and those installed packages add
(nothing here names one; tests/test_plugins.py runs it over an installed plugin's task):
each of its tasks loads offline from the local data and scores a stub model that replies with the family's reference
reply (:attr:`~snapeval.tasks.families.TaskFamily.reference_reply`, the answer of each doc in the family's format)
as entirely right, and one that replies nothing as entirely wrong."""
from __future__ import annotations

import pytest

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.tasks import TaskManager  # noqa: E402

from snapeval.tasks.folders import task_folders  # noqa: E402
from snapeval.results.schema import from_lm_eval  # noqa: E402
from snapeval.tasks.families import families  # noqa: E402
from tests.conftest import DATA_DIR  # noqa: E402
from tests.fixtures.stub_lm import StubLM  # noqa: E402

#: What a generated family's tasks need to build items (a tokenizer to size them, short lengths, few samples).
GENERATED = {"pretrained": "smollm2-135m-instruct", "max_seq_lengths": [256], "num_samples": 3}

TASKS = [pytest.param(family, task, id=task) for family in families() for task in family.task_names()]


def test_every_family_is_found_with_its_tasks():
    assert TASKS and all(family.task_names() for family in families())


def score(task: str, family, reply) -> tuple[float, str]:
    """The task's headline metric (its first) under a stub model answering ``reply(doc)``."""
    metadata = {"data_dir": str(DATA_DIR), **({} if family.data is not None else GENERATED)}
    # every task folder a run reads: the shipped one and those installed families add (a plugin task too)
    manager = TaskManager(include_path=[str(f) for f in task_folders()], include_defaults=False, metadata=metadata)
    out = lm_eval.simple_evaluate(model=StubLM(lambda doc, sample, context, kwargs: reply(doc)), tasks=[task],
                                  task_manager=manager, limit=3, log_samples=True, bootstrap_iters=0)
    cell = from_lm_eval("cell", {}, out)
    assert len(cell.samples) == 3
    return cell.metrics[0].value, cell.metrics[0].key


@pytest.mark.parametrize("family, task", TASKS)
def test_a_task_scores_the_reference_reply_right_and_an_empty_reply_wrong(family, task):
    if family.reference_reply is None:
        pytest.skip(f"{family.name} declares no reference reply (its scoring runs programs: "
                    "tests/test_protocols_livecodebench.py)")
    missing = [rel for rel in family.data_files if not (DATA_DIR / rel).is_file()]
    if missing:
        pytest.skip(f"real data not available: {DATA_DIR / missing[0]} is absent (set SNAPEVAL_DATA_DIR)")
    right, key = score(task, family, family.reference_reply)
    assert right == 1.0, key
    wrong, _ = score(task, family, lambda doc: "")
    assert wrong == 0.0, key
