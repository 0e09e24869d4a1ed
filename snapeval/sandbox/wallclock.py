"""The run's own wall clock: a part of the driver (``driver.py`` loads it from the run's bundle; standard library only,
no snapeval imports), set up before any program code runs.

``CLOCK_REALTIME`` has no offset in a time namespace (the kernel's rule) and the vDSO reads it without a system call
the seccomp filter could see, so a program read the host's wall clock, and with it when the previous sample of its
problem ended (issue #60: a correct sample ended each test at a clock phase that encoded its answers). Here every way
the interpreter gives a program to read the wall clock reads the host's clock plus one offset drawn afresh for every
run, so that the run's "now" is a random instant between :data:`EPOCH_S` and ``EPOCH_S + SPAN_S``, whatever the
host's time: ``time.time``/``time_ns``, ``time.clock_gettime``/``clock_gettime_ns`` of the realtime clocks
(:data:`REALTIME_CLOCKS`), ``time.localtime``/``gmtime``/``ctime``/``asctime``/``strftime`` without a time,
``datetime.datetime.now``/``utcnow`` (a subclass of the C type: the C methods read the clock themselves) and
``date.today``/``datetime.today`` (which read ``time.time``), ``uuid.uuid1`` (``time.time_ns``: the C library's
generator is not loaded), and the times the kernel stamps on files (``os.stat``, ``lstat``, ``fstat``, ``scandir``
entries, ``os.utime``'s times back, in ``os`` and ``posix``): a file the run writes, its ``/work``, its FIFOs
(stamped by each test's input) are all seen at the run's own time. ``os.times()``'s ``elapsed``, which the kernel
counts from the host's boot in every time namespace, becomes the run's own monotonic clock (at a random offset,
``driver.enter_own_clocks``). Durations are unchanged: the offset is constant for the run, so ``time.time() - start``
measures what it measured.

This is the interpreter's view, not a kernel layer: code that gets past it (the originals this module keeps, the C
``datetime`` type under the subclass, a new instance of a built-in module, C code reading the clock itself: numpy's
``datetime64('now')``, native code, the TSC) reads the host's clock; what that can tell is bounded by the order and
spacing of the runs (``harness.run_programs``, docs/sandbox.md).
"""
import math
import os
import sys
import types

#: The run's wall clock starts at a random instant of ``[EPOCH_S, EPOCH_S + SPAN_S)`` (2000-01-01 to 2034).
EPOCH_S = 946_684_800
SPAN_S = 1 << 30
#: ``CLOCK_REALTIME``, ``CLOCK_REALTIME_COARSE``, ``CLOCK_REALTIME_ALARM``, ``CLOCK_TAI`` (Linux numbers).
REALTIME_CLOCKS = frozenset({0, 5, 8, 11})
#: Modules of C code that reads the wall clock itself, not through ``time``, kept out so that their pure-Python
#: fallbacks, which read ``time``, are used: ``uuid``'s generator (``uuid1`` then reads ``time.time_ns``).
C_CLOCK_READERS = ("_uuid",)
_NS = 1_000_000_000


def _named(function, like):
    function.__name__, function.__qualname__, function.__doc__ = like.__name__, like.__qualname__, like.__doc__
    function.__module__ = getattr(like, "__module__", None)
    return function


def own_wall_clock(offset_ns=None):
    """Install the run's wall clock (see the module docstring); ``offset_ns`` (tests) instead of a random one.
    Returns the offset in nanoseconds (the run's time less the host's)."""
    import time
    import posix

    if offset_ns is None:
        draw = int.from_bytes(os.urandom(16), "little")
        offset_ns = EPOCH_S * _NS + draw % (SPAN_S * _NS) - time.time_ns()
    offset = int(offset_ns)
    real_time_ns, real_clock_ns = time.time_ns, time.clock_gettime_ns
    real_localtime, real_gmtime, real_ctime = time.localtime, time.gmtime, time.ctime
    real_asctime, real_strftime, real_monotonic_ns = time.asctime, time.strftime, time.monotonic_ns

    def as_seconds(ns):  # as the interpreter turns a clock's reading into a float
        return ns / 1e9

    def time_ns():
        return real_time_ns() + offset

    def time_():
        return as_seconds(real_time_ns() + offset)

    def clock_gettime_ns(clock):
        return real_clock_ns(clock) + (offset if clock in REALTIME_CLOCKS else 0)

    def clock_gettime(clock):
        seconds, ns = divmod(clock_gettime_ns(clock), _NS)
        return seconds + ns * 1e-9

    def localtime(secs=None):
        return real_localtime(time_() if secs is None else secs)

    def gmtime(secs=None):
        return real_gmtime(time_() if secs is None else secs)

    def ctime(secs=None):
        return real_ctime(time_() if secs is None else secs)

    def asctime(t=None):
        return real_asctime(localtime() if t is None else t)

    def strftime(format, t=None):
        return real_strftime(format, localtime() if t is None else t)

    for name, function in (("time", time_), ("time_ns", time_ns), ("clock_gettime", clock_gettime),
                           ("clock_gettime_ns", clock_gettime_ns), ("localtime", localtime), ("gmtime", gmtime),
                           ("ctime", ctime), ("asctime", asctime), ("strftime", strftime)):
        setattr(time, name, _named(function, getattr(time, name)))

    _own_file_times(posix, offset)
    _own_elapsed(posix, real_monotonic_ns)
    _own_datetime(time_ns)
    for name in C_CLOCK_READERS:
        sys.modules[name] = None
    if "uuid" in sys.modules:  # imported before (not by the driver): again, on its pure-Python generator
        del sys.modules["uuid"]
        __import__("uuid")
    return offset


def _own_datetime(time_ns):
    """``datetime.datetime`` as a subclass of the C type whose ``now`` and ``utcnow`` read ``time.time_ns`` (the C
    ones read the clock themselves, as ``datetime_best_possible``: the time in microseconds, rounded down); every
    other method is the C type's, and returns the subclass as it returns the class it is called on. ``date.today``
    and ``datetime.today`` already read ``time.time``. ``repr``, ``min`` and ``max`` as the C type has them; a
    datetime that C code makes itself (numpy's ``datetime64.item()``) is the C type's, not an instance of this."""
    import datetime as module

    base = module.datetime
    while getattr(base, "_run_clock", False):  # installed before (tests): on the C type again
        base = base.__bases__[0]

    class datetime(base):
        __slots__ = ()
        _run_clock = True

        @classmethod
        def now(cls, tz=None):
            seconds, micro = divmod(time_ns() // 1000, 1_000_000)
            return cls.fromtimestamp(seconds, tz).replace(microsecond=micro)

        @classmethod
        def utcnow(cls):
            seconds, micro = divmod(time_ns() // 1000, 1_000_000)
            return cls.utcfromtimestamp(seconds).replace(microsecond=micro)

        def __repr__(self):
            text = base.__repr__(self)
            return "datetime." + text if text.startswith("datetime(") else text

    datetime.__module__, datetime.__qualname__, datetime.__doc__ = base.__module__, base.__qualname__, base.__doc__
    datetime.now.__func__.__doc__, datetime.utcnow.__func__.__doc__ = base.now.__doc__, base.utcnow.__doc__
    datetime.min, datetime.max = datetime.combine(base.min, base.min.time()), datetime.combine(base.max,
                                                                                                base.max.time())
    module.datetime = datetime


def _shifted(st, offset):
    """``st`` (an ``os.stat_result``) with its three times moved by ``offset`` nanoseconds (its fields as pickling
    gives them: the ten of the tuple, the others by name)."""
    kind, (visible, named) = st.__reduce__()
    a, m, c = named["st_atime_ns"] + offset, named["st_mtime_ns"] + offset, named["st_ctime_ns"] + offset
    named["st_atime_ns"], named["st_mtime_ns"], named["st_ctime_ns"] = a, m, c
    named["st_atime"], named["st_mtime"], named["st_ctime"] = as_float(a), as_float(m), as_float(c)
    return kind(visible[:7] + (a // _NS, m // _NS, c // _NS), named)


def as_float(ns):
    """Nanoseconds as the interpreter gives a file's time in seconds (``tv_sec + tv_nsec * 1e-9``)."""
    seconds, rest = divmod(ns, _NS)
    return seconds + rest * 1e-9


def _to_ns(value):
    """A time given to ``os.utime`` in seconds, as nanoseconds (rounded down, as the interpreter does)."""
    if isinstance(value, int):
        return value * _NS
    seconds = math.floor(value)
    return int(seconds) * _NS + math.floor((value - seconds) * 1e9)


def _own_file_times(posix, offset):
    """The file-time functions of ``posix`` and ``os`` on the run's clock. The import system keeps the original
    functions (a module of its own standing in for ``posix``): it compares a source file's time with its bytecode's,
    which the shift would make differ (every import after set-up compiled again)."""
    import os as os_module

    external = sys.modules.get("_frozen_importlib_external")
    if external is not None and getattr(external, "_os", None) is posix:
        original = types.ModuleType("posix")
        original.__dict__.update(posix.__dict__)
        external._os = original
    real_stat, real_lstat, real_fstat = posix.stat, posix.lstat, posix.fstat
    real_scandir, real_utime, real_entry = posix.scandir, posix.utime, posix.DirEntry

    def stat(path, *, dir_fd=None, follow_symlinks=True):
        return _shifted(real_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks), offset)

    def lstat(path, *, dir_fd=None):
        return _shifted(real_lstat(path, dir_fd=dir_fd), offset)

    def fstat(fd):
        return _shifted(real_fstat(fd), offset)

    def utime(path, times=None, *, ns=None, dir_fd=None, follow_symlinks=True):
        if times is not None and ns is None and isinstance(times, tuple) and len(times) == 2:
            try:
                ns, times = (_to_ns(times[0]) - offset, _to_ns(times[1]) - offset), None
            except (TypeError, ValueError, OverflowError):  # the interpreter's own error for it
                pass
        elif ns is not None and isinstance(ns, tuple) and len(ns) == 2 and all(type(n) is int for n in ns):
            ns = (ns[0] - offset, ns[1] - offset)
        if ns is None:
            return real_utime(path, times, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
        return real_utime(path, times, ns=ns, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    class DirEntry:
        """A directory entry of ``os.scandir`` whose ``stat()`` is on the run's clock."""
        __slots__ = ("_entry",)

        def __init__(self, entry):
            self._entry = entry

        name = property(lambda self: self._entry.name)
        path = property(lambda self: self._entry.path)

        def inode(self):
            return self._entry.inode()

        def is_dir(self, *, follow_symlinks=True):
            return self._entry.is_dir(follow_symlinks=follow_symlinks)

        def is_file(self, *, follow_symlinks=True):
            return self._entry.is_file(follow_symlinks=follow_symlinks)

        def is_symlink(self):
            return self._entry.is_symlink()

        def stat(self, *, follow_symlinks=True):
            return _shifted(self._entry.stat(follow_symlinks=follow_symlinks), offset)

        def __fspath__(self):
            return self._entry.__fspath__()

        def __repr__(self):
            return repr(self._entry)

        __class_getitem__ = classmethod(types.GenericAlias)

    class ScandirIterator:
        __slots__ = ("_it",)

        def __init__(self, it):
            self._it = it

        def __iter__(self):
            return self

        def __next__(self):
            return DirEntry(next(self._it))

        def close(self):
            self._it.close()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._it.close()
            return False

    def scandir(path="."):
        return ScandirIterator(real_scandir(path))

    DirEntry.__module__ = ScandirIterator.__module__ = real_entry.__module__
    DirEntry.__qualname__, ScandirIterator.__qualname__ = "DirEntry", "ScandirIterator"
    for name, function in (("stat", stat), ("lstat", lstat), ("fstat", fstat), ("utime", utime),
                           ("scandir", scandir)):
        function = _named(function, getattr(posix, name))
        setattr(posix, name, function)
        setattr(os_module, name, function)
    posix.DirEntry = os_module.DirEntry = DirEntry


def _own_elapsed(posix, real_monotonic_ns):
    """``os.times()`` with ``elapsed`` from the run's monotonic clock: the kernel's ``times(2)`` counts it from the
    host's boot in every time namespace (a clock of the host's, at 10 ms)."""
    import os as os_module

    real_times = posix.times

    def times():
        t = real_times()
        return type(t)((t[0], t[1], t[2], t[3], real_monotonic_ns() // 10_000_000 / 100))

    times = _named(times, real_times)
    posix.times = os_module.times = times
