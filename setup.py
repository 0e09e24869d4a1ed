"""Packaging beyond pyproject.toml: the task YAML lives at the repository's top level (``tasks/``, where lm-eval users
look: ``lm_eval --include_path tasks/``) and is installed inside the package as ``snapeval/task_yaml``, where
:func:`snapeval.paths.tasks_dir` finds it when snapeval runs from a wheel."""
from setuptools import find_namespace_packages, setup

setup(
    packages=[*find_namespace_packages(include=["snapeval", "snapeval.*"], exclude=["*.__pycache__"]),
              "snapeval.task_yaml"],
    package_dir={"snapeval.task_yaml": "tasks"},
    package_data={"": ["*.yaml", "*.json"], "snapeval.task_yaml": ["*/*.yaml"]},
)
