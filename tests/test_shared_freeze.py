"""The sweep's shared groups freeze what lives once the first model is loaded (snapeval.harness.shared), so the
collection after each engine skips it; what a group creates afterwards must stay collectable. Run in a fresh
interpreter: freezing is process-wide."""
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import gc, weakref
    from snapeval.harness import shared

    class Node:
        pass

    before = Node(); before.self = before            # alive at the freeze: frozen with the rest
    shared._freeze_once()
    frozen = gc.get_freeze_count()
    assert frozen > 0, frozen
    shared._freeze_once()                            # once per process: a second group freezes nothing more
    assert gc.get_freeze_count() == frozen, (frozen, gc.get_freeze_count())

    after = Node(); after.self = after               # a group's own garbage, in a reference cycle
    gone = weakref.ref(after)
    del after
    gc.collect()
    assert gone() is None, "a cycle created after the freeze was not collected"
    print("ok", frozen)
""")


def test_freeze_once_keeps_later_cycles_collectable():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok ")
