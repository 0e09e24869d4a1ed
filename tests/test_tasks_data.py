"""Data loading: real rows from ../shared/data validate; broken files give one-line errors naming file/line/field."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from snapeval.errors import SnapevalError
from snapeval.tasks import aime, data, livecodebench, longbench

from tests.conftest import DATA_DIR as DATA  # noqa: E402  (the shared data folder, as conftest finds it)


def _need(rel: str) -> Path:
    path = DATA / rel
    if not path.is_file():
        pytest.skip(f"real data not available: {path} is absent (set SNAPEVAL_DATA_DIR)")
    return path


def test_aime_real_rows_load_and_hash():
    path = _need("aime24/aime_2024.jsonl")
    loaded = aime.load(DATA)
    assert loaded.rows_total == 30 and loaded.rows_used == 30
    assert loaded.sha256 == data.sha256_file(path)
    assert {r["ID"] for r in loaded.rows} >= {"2024-I-1", "2024-II-15"}
    assert data.loaded_data_records()["aime24"]["sha256"] == loaded.sha256


def test_livecodebench_real_rows_filters():
    _need("livecodebench/code_generation_lite.jsonl")
    everything = livecodebench.load(DATA)
    assert everything.rows_used == 1055 and everything.notes["private_tests"] is False
    v1 = livecodebench.load(DATA, release_version="release_v1")
    assert v1.rows_used == 400
    v6_only = livecodebench.load(DATA, release_version="v6")
    assert v6_only.rows_used == 175
    window = livecodebench.load(DATA, start_date="2024-08-01", end_date="2025-02-01")
    assert all("2024-08-01" <= r["contest_date"][:10] <= "2025-02-01" for r in window.rows)
    assert 0 < window.rows_used < 1055
    assert data.loaded_data_records()["livecodebench"]["rows_used"] == window.rows_used
    with pytest.raises(SnapevalError, match="release_version='release_v9'"):
        livecodebench.load(DATA, release_version="release_v9")


def test_longbench_real_rows_load():
    _need("longbench_v2/longbench_v2.jsonl")
    loaded = longbench.load(DATA)
    assert loaded.rows_used == 395
    assert {r["length"] for r in loaded.rows} == {"short", "medium"}
    assert {r["domain"] for r in loaded.rows} <= set(longbench.DOMAINS)


@pytest.fixture()
def broken_dir(tmp_path):
    (tmp_path / "aime24").mkdir()
    return tmp_path


def _write(dir_: Path, lines: list[str]) -> Path:
    path = dir_ / "aime24" / "aime_2024.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = json.dumps({"ID": "x", "Problem": "p", "Solution": "s", "Answer": 5})


@pytest.mark.parametrize("line, message", [
    (json.dumps({"ID": "x", "Problem": "p", "Solution": "s"}), r"aime_2024\.jsonl:2: missing field 'Answer'"),
    (json.dumps({"ID": "x", "Problem": 3, "Solution": "s", "Answer": 5}),
     r"aime_2024\.jsonl:2: field 'Problem' must be str, got int"),
    (json.dumps({"ID": "x", "Problem": "p", "Solution": "s", "Answer": True}), r":2: field 'Answer' must be int/str"),
    ('{"ID": "x", "Problem": ', r"aime_2024\.jsonl:2: not valid JSON"),
    (json.dumps({"ID": "x", "Problem": "p", "Solution": "s", "Answer": "twelve"}), r":2: field 'Answer'='twelve'"),
])
def test_broken_rows_give_one_line_errors(broken_dir, line, message):
    _write(broken_dir, [GOOD, line])
    with pytest.raises(SnapevalError, match=message) as err:
        aime.load(broken_dir)
    assert "\n" not in str(err.value)


def test_missing_file_names_the_file_and_the_setting(tmp_path):
    with pytest.raises(SnapevalError, match=r"aime_2024\.jsonl: data file not found \(set --data-dir or SNAPEVAL_DATA_DIR"):
        aime.load(tmp_path)


def test_env_data_dir_and_offline_fail_fast(broken_dir, monkeypatch):
    _write(broken_dir, [GOOD])
    monkeypatch.setenv("SNAPEVAL_DATA_DIR", str(broken_dir))
    assert aime.load().source.startswith(str(broken_dir))
    monkeypatch.delenv("SNAPEVAL_DATA_DIR")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError("hub_offline() opened a connection although HF_HUB_OFFLINE=1")

    monkeypatch.setattr(data.socket, "create_connection", no_network)  # fail fast = no connection attempted at all
    assert data.hub_offline()


def test_a_data_file_is_parsed_once_per_content(broken_dir, monkeypatch):
    """A file loaded again is not parsed again while its bytes are unchanged (a sweep builds its tasks once per
    cell), each load gets its own rows, and a file rewritten (the same size, the same second) is read anew."""
    path = _write(broken_dir, [GOOD, GOOD.replace('"x"', '"y"')])
    parsed = []
    real = data.read_jsonl_located
    monkeypatch.setattr(data, "read_jsonl_located", lambda p, schema: parsed.append(p) or real(p, schema))
    first = aime.load(broken_dir)
    first.rows[0]["Problem"] = "changed by a caller"
    second = aime.load(broken_dir)
    assert len(parsed) == 1 and second.rows[0]["Problem"] == "p" and second.sha256 == first.sha256
    path.write_text(path.read_text().replace('"y"', '"z"'))  # the same size
    third = aime.load(broken_dir)
    assert len(parsed) == 2 and third.rows[1]["ID"] == "z" and third.sha256 != first.sha256


def test_a_files_rows_are_converted_once_and_give_the_dataset_converted_whole(broken_dir, monkeypatch):
    """:func:`snapeval.tasks.hooks.as_dataset` of a data file's rows with a task's own columns after them (as every
    dataset hook builds them) converts the file's columns once per process and adds the task's: the same columns in
    the same order, types and values as converting the rows whole (lm-eval hashes each doc as JSON: key order
    matters); rows that are not a read file's (a value changed) are converted whole."""
    import datasets

    from snapeval.tasks.hooks import as_dataset

    _write(broken_dir, [json.dumps({"ID": f"i{i}", "Problem": "word " * i, "Solution": "s", "Answer": i})
                        for i in range(7)])
    converted = []
    real = datasets.Dataset.from_list
    monkeypatch.setattr(datasets.Dataset, "from_list", lambda rows, **kw: converted.append(len(rows)) or real(rows, **kw))
    for cot, limit in ((True, 512), (False, 1024), (True, 512)):  # the file's rows converted at the first only
        loaded = aime.load(broken_dir)
        rows = [{**r, "cot": cot, "max_input_tokens": limit, "cluster": f"c{i // 2}"} for i, r in enumerate(loaded.rows)]
        ours = as_dataset(rows)["test"]
        whole = real([dict(r) for r in rows], split=datasets.Split.TEST)
        assert ours.features == whole.features and ours.column_names == whole.column_names
        assert [json.dumps(d) for d in ours] == [json.dumps(d) for d in whole]
    assert converted == [7]
    changed = [{**r, "Answer": str(r["Answer"])} for r in aime.load(broken_dir).rows]  # AIME's hook does this
    assert as_dataset(changed)["test"]["Answer"] == [str(i) for i in range(7)] and converted == [7, 7]
