"""The lm-eval hooks of the AIME 2024 tasks (``aime24_snapeval.yaml``, ``aime24_snapeval_sampled.yaml`` beside this
file)."""
from __future__ import annotations

from typing import Any

from snapeval.tasks import aime
from snapeval.tasks.hooks import as_dataset, cluster_of, provenance, reasoning, samples_of


def aime24_dataset(**md: Any) -> dict[str, Any]:
    data = aime.load(md.get("data_dir"))
    extra = {"reasoning": reasoning(md), **provenance(data)}
    # one record per problem holds all its samples: the problem is the cluster
    return as_dataset([{**row, "Answer": str(row["Answer"]), **extra, "cluster": cluster_of("aime24", str(row["ID"]))}
                        for row in data.rows])


def aime24_doc_to_text(doc: dict) -> str:
    return aime.build_prompt(doc)


def aime24_process_results(doc: dict, results: list) -> dict[str, float]:
    return aime.score(doc, samples_of(results), assume_thinking=doc["reasoning"])
