"""The sandbox's seccomp filter: the allowed system calls, the argument rules, and the classic BPF program that
enforces them (step 4 of the driver's set-up, see ``driver.py``). Part of the driver (``driver.py`` loads this file by
its path before its set-up; standard library only, no snapeval imports).
"""
import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


# An allow-list: every system call not named here is refused with EPERM. The list is what a Python program under the
# grading protocol was seen to use (traces of real LiveCodeBench programs, the stdin idioms, threads, numpy; see
# docs/sandbox.md, which gives the reason for each), plus the older spellings of the same calls. Some are allowed
# with some arguments only (``ARGUMENT_RULES``): ``fcntl`` on the caller's own descriptors but no record locks,
# leases or directory notification (a lock on a file every run sees read-only is a channel between runs);
# ``futex`` process-private only (a shared futex on a page of a file every run maps is another);
# ``madvise`` without
# the advice that evicts or fills the page cache or merges pages across processes; ``preadv2``/``pwritev2``
# without flags (RWF_NOWAIT tells whether a page is cached); ``ioctl`` with the terminal and descriptor requests
# the standard library makes; ``prctl`` with thread names and further filters. ``clone`` makes threads only
# (CLONE_THREAD and no namespace flag); ``clone3`` answers ENOSYS so that the C library falls back to ``clone``,
# whose flags the filter can read. Left out, among others: new processes and exec, namespaces and mounts, ptrace
# and cross-process memory, new pipes and sockets (each takes its inode number from one kernel-wide counter, which
# fstat shows: a run making them moved it for the next run of the same problem to read; the run's own pipes are
# made by the harness), keyrings, bpf, perf, userfaultfd, io_uring and legacy AIO (``io_setup`` draws on a
# host-wide limit), SysV IPC, POSIX message queues and memfd (memory the rlimits do not count), ``flock``, inotify,
# fanotify, the page-cache primitives (``fadvise64``, ``readahead``, ``mincore``, ``cachestat``), file handles, module
# and kexec loading, the kernel log. Any other architecture (x32, i386 through ``int 0x80``) kills the process.
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7, "arm64": 0xC00000B7}
#: name -> (x86_64 number, arm64 number): both from the kernel's unistd headers.
ALLOWED_SYSCALLS = {
    # reading and writing the descriptors it holds
    "read": (0, 63), "write": (1, 64), "readv": (19, 65), "writev": (20, 66), "pread64": (17, 67),
    "pwrite64": (18, 68), "preadv": (295, 69), "pwritev": (296, 70), "lseek": (8, 62), "close": (3, 57),
    "close_range": (436, 436), "dup": (32, 23), "dup3": (292, 24), "fsync": (74, 82), "fdatasync": (75, 83),
    "ftruncate": (77, 46), "truncate": (76, 45), "fallocate": (285, 47), "sendfile": (40, 71),
    "copy_file_range": (326, 285),
    # files and directories (the shared ones are read-only mounts: writes there fail with EROFS)
    "openat": (257, 56), "newfstatat": (262, 79), "fstat": (5, 80), "faccessat": (269, 48),
    "faccessat2": (439, 439), "readlinkat": (267, 78), "getdents64": (217, 61), "getcwd": (79, 17),
    "chdir": (80, 49), "fchdir": (81, 50), "mkdirat": (258, 34), "unlinkat": (263, 35), "renameat": (264, 38),
    "renameat2": (316, 276), "symlinkat": (266, 36), "linkat": (265, 37), "mknodat": (259, 33),
    "fchmod": (91, 52), "fchmodat": (268, 53), "fchown": (93, 55), "fchownat": (260, 54), "utimensat": (280, 88),
    "umask": (95, 166), "statfs": (137, 43), "fstatfs": (138, 44), "getxattr": (191, 8), "lgetxattr": (192, 9),
    "fgetxattr": (193, 10), "listxattr": (194, 11), "llistxattr": (195, 12), "flistxattr": (196, 13),
    # memory
    "brk": (12, 214), "mmap": (9, 222), "munmap": (11, 215), "mremap": (25, 216), "mprotect": (10, 226),
    "msync": (26, 227), "mbind": (237, 235), "get_mempolicy": (239, 236), "set_mempolicy": (238, 237),
    # time, sleeping, waiting
    "clock_gettime": (228, 113), "clock_getres": (229, 114), "gettimeofday": (96, 169), "nanosleep": (35, 101),
    "clock_nanosleep": (230, 115), "times": (100, 153), "getitimer": (36, 102), "setitimer": (38, 103),
    "timer_create": (222, 107), "timer_settime": (223, 110), "timer_gettime": (224, 108),
    "timer_getoverrun": (225, 109), "timer_delete": (226, 111), "ppoll": (271, 73), "pselect6": (270, 72),
    "epoll_create1": (291, 20), "epoll_ctl": (233, 21), "epoll_pwait": (281, 22), "epoll_pwait2": (441, 441),
    "eventfd2": (290, 19), "restart_syscall": (219, 128),
    # signals (other processes are out of reach: a PID namespace and a uid of the run's own)
    "rt_sigaction": (13, 134), "rt_sigprocmask": (14, 135), "rt_sigreturn": (15, 139), "sigaltstack": (131, 132),
    "rt_sigsuspend": (130, 133), "rt_sigtimedwait": (128, 137), "rt_sigpending": (127, 136), "kill": (62, 129),
    "tgkill": (234, 131), "tkill": (200, 130),
    # threads and the process itself
    "exit": (60, 93), "exit_group": (231, 94), "set_tid_address": (218, 96), "set_robust_list": (273, 99),
    "get_robust_list": (274, 100), "rseq": (334, 293), "sched_yield": (24, 124),
    "sched_getaffinity": (204, 123), "sched_setaffinity": (203, 122), "sched_getparam": (143, 121),
    "sched_getscheduler": (145, 120), "sched_get_priority_max": (146, 125), "sched_get_priority_min": (147, 126),
    "getpriority": (140, 141), "gettid": (186, 178), "getpid": (39, 172), "getppid": (110, 173),
    "getuid": (102, 174), "geteuid": (107, 175), "getgid": (104, 176), "getegid": (108, 177),
    "getgroups": (115, 158), "getresuid": (118, 148), "getresgid": (120, 150), "getpgid": (121, 155),
    "getsid": (124, 156), "getrlimit": (97, 163), "setrlimit": (160, 164), "prlimit64": (302, 261),
    "getrusage": (98, 165), "uname": (63, 160), "getrandom": (318, 278), "getcpu": (309, 168),
    "membarrier": (324, 283),
}
#: The x86-64 spellings of the same calls that the arm64 kernel does not have (older C libraries use them).
X86_LEGACY_SYSCALLS = {
    "open": 2, "creat": 85, "stat": 4, "lstat": 6, "access": 21, "readlink": 89, "mkdir": 83, "rmdir": 84,
    "unlink": 87, "rename": 82, "symlink": 88, "link": 86, "chmod": 90, "chown": 92, "lchown": 94, "utimes": 235,
    "futimesat": 261, "dup2": 33, "select": 23, "poll": 7, "alarm": 37, "pause": 34, "getpgrp": 111,
    "time": 201, "epoll_wait": 232, "epoll_create": 213, "getdents": 78, "eventfd": 284, "arch_prctl": 158,
}
#: name -> (x86_64, arm64, index of the argument checked, the values allowed): see the comment above.
ARGUMENT_RULES = {
    # F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC, F_SETPIPE_SZ, F_GETPIPE_SZ
    "fcntl": (72, 25, 1, (0, 1, 2, 3, 4, 1030, 1031, 1032)),
    # TCGETS, TIOCGWINSZ, FIONREAD, FIONBIO, FIONCLEX, FIOCLEX (isatty, terminal size, non-blocking, close-on-exec)
    "ioctl": (16, 29, 1, (0x5401, 0x5413, 0x541B, 0x5421, 0x5450, 0x5451)),
    # NORMAL, RANDOM, SEQUENTIAL, DONTNEED, FREE, DONTFORK, DOFORK, HUGEPAGE, NOHUGEPAGE, DONTDUMP, DODUMP,
    # WIPEONFORK, KEEPONFORK (not WILLNEED, COLD, PAGEOUT, POPULATE_*: the page cache; not MERGEABLE: KSM)
    "madvise": (28, 233, 2, (0, 1, 2, 4, 8, 10, 11, 14, 15, 16, 17, 18, 19)),
    # PR_SET_PDEATHSIG, PR_GET_PDEATHSIG, PR_GET_DUMPABLE, PR_SET_NAME, PR_GET_NAME, PR_GET_SECCOMP,
    # PR_SET_SECCOMP, PR_CAPBSET_READ, PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS, PR_SET_VMA (names a mapping)
    "prctl": (157, 167, 0, (1, 2, 3, 15, 16, 21, 22, 23, 38, 39, 0x53564D41)),
    # process-private operations only (FUTEX_PRIVATE_FLAG, with or without FUTEX_CLOCK_REALTIME): a shared futex is
    # keyed by the page, so two runs mapping the same read-only file could wake each other's waiters
    "futex": (202, 98, 1, tuple(op | 128 | clock for op in (0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)
                                for clock in (0, 256))),
    "preadv2": (327, 286, 5, (0,)),  # no RWF_* flags
    "pwritev2": (328, 287, 5, (0,)),
}
CLONE, CLONE3 = (56, 220), (435, 435)
#: statx answers ENOSYS (the C library's stat functions use newfstatat/fstat, and a statx caller falls back to
#: them): its mount id (``stx_mnt_id``, filled whatever the mask asks; the unique id of ``STATX_MNT_ID_UNIQUE`` from
#: one host-wide counter that every mount of every run advances) told a run how many mounts the host had made since
#: the previous run of its problem (issue #60).
STATX = (332, 291)
CLONE_THREAD = 0x00010000
CLONE_NAMESPACES = 0x7E020080  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
EPERM, ENOSYS = 1, 38


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_program(machine):
    """The BPF program as ``(code, jt, jf, k)`` tuples, or ``None`` for an unknown architecture. Every jump is
    forward and short (one byte): each argument check is a block with its own returns, and the plain allow-list
    comes in chunks, each ending in its own ``ret ALLOW``."""
    arch = _AUDIT_ARCH.get(machine)
    if arch is None:
        return None
    column = 0 if machine == "x86_64" else 1
    ld, jeq, jset, jge, ja, ret = 0x20, 0x15, 0x45, 0x35, 0x05, 0x06
    allow, eperm, enosys, kill = 0x7FFF0000, 0x00050000 | EPERM, 0x00050000 | ENOSYS, 0x80000000

    def arg(index):  # the low 32 bits of an argument (little endian)
        return (ld, 0, 0, 16 + 8 * index)

    program = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill), (ld, 0, 0, 0)]  # seccomp_data.arch, then nr
    if machine == "x86_64":
        program += [(jge, 0, 1, 0x40000000), (ret, 0, 0, kill)]  # x32 system calls
    program += [(jeq, 0, 1, CLONE3[column]), (ret, 0, 0, enosys), (jeq, 0, 1, STATX[column]), (ret, 0, 0, enosys)]
    # clone: threads only (CLONE_THREAD set, no namespace flag)
    program += [(jeq, 0, 5, CLONE[column]), arg(0), (jset, 2, 0, CLONE_NAMESPACES), (jset, 0, 1, CLONE_THREAD),
                (ret, 0, 0, allow), (ret, 0, 0, eperm)]
    for x86, arm, index, values in ARGUMENT_RULES.values():
        n = len(values)
        program.append((jeq, 0, n + 3, (x86, arm)[column]))
        program.append(arg(index))
        program += [(jeq, n - i, 0, value) for i, value in enumerate(values)]
        program += [(ret, 0, 0, eperm), (ret, 0, 0, allow)]
    numbers = [nr[column] for nr in ALLOWED_SYSCALLS.values()]
    if machine == "x86_64":
        numbers += list(X86_LEGACY_SYSCALLS.values())
    for at in range(0, len(numbers), 200):
        chunk = numbers[at:at + 200]
        program += [(jeq, len(chunk) - i, 0, nr) for i, nr in enumerate(chunk)]
        program += [(ja, 0, 0, 1), (ret, 0, 0, allow)]
    program.append((ret, 0, 0, eperm))  # everything else
    return program


def install_seccomp():
    """Install the filter (``no_new_privs`` must be set); False on an architecture it does not know or a kernel
    without seccomp filters."""
    program = seccomp_program(os.uname().machine)
    if program is None:
        return False
    filters = (_SockFilter * len(program))(*[_SockFilter(*ins) for ins in program])
    prog = _SockFprog(len(program), filters)
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        if ctypes.get_errno() == 22:  # EINVAL: a kernel without seccomp filters (the probe says so)
            return False
        _check(-1, "seccomp")
    return True
