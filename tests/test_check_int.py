"""The one integer check (``snapeval.errors.check_int``): a bool is no integer, a bound is inclusive, the message is
one line naming the field, the value and what is allowed, and the error class is the caller's."""
import pytest

from snapeval.errors import SnapevalError, check_int, is_int


def test_a_bool_is_not_an_integer():
    assert is_int(0) and is_int(-3) and not is_int(True) and not is_int(False) and not is_int(2.0)


@pytest.mark.parametrize("bad", [True, False, 0, 1.0, "2", None])
def test_check_int_refuses_in_one_line(bad):
    with pytest.raises(SnapevalError) as info:
        check_int("budget", bad, 1)
    assert str(info.value) == f"budget={bad!r} is invalid; allowed: an integer >= 1"


def test_check_int_returns_the_value_and_raises_the_callers_class():
    assert check_int("budget", 1, 1) == 1
    assert check_int("offset", -5) == -5
    with pytest.raises(ValueError) as info:
        check_int("batch", 0, 1, error=ValueError)
    assert type(info.value) is ValueError and str(info.value) == "batch=0 is invalid; allowed: an integer >= 1"
    with pytest.raises(SnapevalError, match=r"^offset=True is invalid; allowed: an integer$"):
        check_int("offset", True)
