"""Nothing of the user's is ever overwritten: a hostile ``.sweep.lock`` (a symbolic link, a hard link, a FIFO), a
results folder of another sweep, a folder holding someone's table, and a sweep killed with ``kill -9``."""
from __future__ import annotations

import io
import json
import os
import signal
import time

import pytest
import yaml

from fixtures.sweep_fakes import fake_evaluate, fake_simulate, start_sweep_process
from snapeval.cli import main as cli
from snapeval.errors import SnapevalError
from snapeval.results.store import SweepLock
from snapeval.sweep import parse_config, run_sweep

RAW = {"name": "mine", "models": ["llama-3.1-8b-instruct"], "tasks": [{"name": "snapeval_passkey", "limit": 4}],
       "methods": ["full", {"method": "snapstream", "budgets": [128, 512]}]}


def sweep(out, raw=RAW):
    return run_sweep(parse_config(raw), out, evaluate=fake_evaluate, simulate=fake_simulate, stream=io.StringIO(),
                     report=False)


def one_line(capsys, argv, *expected):
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for text in expected:
        assert text in err, err
    return err


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "precious.txt"
    path.write_text("the user's own words\n")
    return path


def test_symlinked_lock_never_writes_its_target(tmp_path, user_file):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".sweep.lock").symlink_to(user_file)
    with pytest.raises(SnapevalError, match=r"\.sweep\.lock is a symbolic link; allowed: a regular file snapeval"):
        sweep(out)
    assert user_file.read_text() == "the user's own words\n"
    dangling = tmp_path / "out2"
    dangling.mkdir()
    (dangling / ".sweep.lock").symlink_to(tmp_path / "would-be-created")
    with pytest.raises(SnapevalError, match="is a symbolic link"):
        sweep(dangling)
    assert not (tmp_path / "would-be-created").exists()


def test_hard_linked_and_fifo_locks_are_refused(tmp_path, user_file):
    out = tmp_path / "out"
    out.mkdir()
    os.link(user_file, out / ".sweep.lock")
    with pytest.raises(SnapevalError, match="a file with 2 hard links"):
        with SweepLock(out):
            pass
    assert user_file.read_text() == "the user's own words\n"
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / ".sweep.lock")
    with pytest.raises(SnapevalError, match="not a regular file"):  # never blocks waiting for a writer
        with SweepLock(fifo):
            pass


def test_model_conversion_lock_never_follows_a_link(tmp_path, user_file):
    from snapeval.models.loading import _file_lock

    (tmp_path / "model.lock").symlink_to(user_file)
    with pytest.raises(SnapevalError, match="is a symbolic link"):
        with _file_lock(tmp_path / "model.lock"):
            pass
    assert user_file.read_text() == "the user's own words\n"


def test_another_sweeps_folder_is_refused_and_kept(tmp_path, capsys):
    theirs = tmp_path / "theirs"
    sweep(theirs, {**RAW, "name": "theirs"})
    manifest = (theirs / "manifest.json").read_bytes()
    config = tmp_path / "mine.yaml"
    config.write_text(yaml.safe_dump(RAW))
    for extra in ([], ["--dry-run"]):
        one_line(capsys, ["sweep", str(config), "--out", str(theirs), *extra],
                 f"--out={str(theirs)!r} holds the results of sweep 'theirs' (its manifest.json); allowed: a new "
                 "folder or one of sweep 'mine'")
    with pytest.raises(SnapevalError, match="holds the results of sweep 'theirs'"):
        sweep(theirs)  # the library entry point checks too, under the lock
    assert (theirs / "manifest.json").read_bytes() == manifest
    again = sweep(theirs, {**RAW, "name": "theirs", "methods": ["full"]})  # the same sweep, edited: allowed
    assert again.ok


def test_a_folder_with_someone_elses_table_is_refused(tmp_path, capsys):
    folder = tmp_path / "analysis"
    folder.mkdir()
    (folder / "results.csv").write_text("a,b\n1,2\n")
    config = tmp_path / "mine.yaml"
    config.write_text(yaml.safe_dump(RAW))
    one_line(capsys, ["sweep", str(config), "--out", str(folder), "--dry-run"],
             "is not a results folder (no manifest.json) but holds results.csv")
    assert (folder / "results.csv").read_text() == "a,b\n1,2\n"


def test_kill_minus_9_then_a_hostile_lock_then_resume(tmp_path, user_file, capsys):
    out = tmp_path / "out"
    proc = start_sweep_process(RAW, out, tmp_path, delay=0.5)
    try:
        deadline = time.monotonic() + 120  # a guard against a hang, not a measurement
        while time.monotonic() < deadline and not list((out / "cells").glob("*.json")):
            time.sleep(0.05)
        assert (out / ".sweep.lock").read_text().strip() == str(proc.pid)
        config = tmp_path / "mine.yaml"
        config.write_text(yaml.safe_dump(RAW))
        one_line(capsys, ["sweep", str(config), "--out", str(out)], f"another sweep (pid {proc.pid})")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    done = len(list((out / "cells").glob("*.json")))
    assert 1 <= done < 3
    (out / ".sweep.lock").unlink()
    (out / ".sweep.lock").symlink_to(user_file)  # planted between the kill and the resume
    with pytest.raises(SnapevalError, match="is a symbolic link"):
        sweep(out)
    assert user_file.read_text() == "the user's own words\n"
    (out / ".sweep.lock").unlink()
    resumed = sweep(out)
    assert resumed.ok and resumed.skipped == done and len(resumed.ran) == 3 - done
    assert json.loads((out / "manifest.json").read_text())["sweep"] == "mine"
