"""Every process a worker starts stays in its process tree for life: a seccomp filter (Linux, x86_64 and aarch64)
that refuses the two ways out of it.

A worker is a child subreaper (harness.shared.containment.setup_worker): a descendant whose parent exits is
re-parented to the worker, so the parent's pause, wake and kill reach it by walking the worker's tree
(containment.stop_tree). Two system calls would take a process out of that tree, to the harness's own parent, where
nothing stops it while the other side is timed and where it can outlive the pair (a red team's helper computed the
next answer from the staged inputs before the clock started: 4-6x on the CPU path):
  * prctl(PR_SET_CHILD_SUBREAPER, 0): the worker stops adopting, and a double fork leaves a grandchild to the
    harness's parent;
  * clone(CLONE_PARENT): a child made a sibling of the worker, the parent's child from the start.
The filter answers those with EPERM (prctl only for PR_SET_CHILD_SUBREAPER, clone only with CLONE_PARENT), and
clone3 (whose flags lie in memory a filter cannot read) with ENOSYS, on which the C library falls back to clone;
every system call of another architecture's table (32-bit int 0x80 on x86_64, the x32 numbers) gets ENOSYS. A
seccomp filter holds for every thread (SECCOMP_FILTER_FLAG_TSYNC) and every process started after it, across exec,
and cannot be removed. It needs no_new_privs (harness.worker.sandbox sets it first). A session or process group of
its own (setsid, setpgid) stays allowed: ninja starts every command in a group of its own."""
from __future__ import annotations

import ctypes
import errno
import platform
import sys

from harness.shared.sandboxprobe import syscall

# (the audit architecture, its system call numbers, the lowest number of a table this filter refuses as a whole)
_ARCHES = {
    "x86_64": (0xC000003E, {"prctl": 157, "clone": 56, "clone3": 435, "seccomp": 317}, 0x40000000),
    "aarch64": (0xC00000B7, {"prctl": 167, "clone": 220, "clone3": 435, "seccomp": 277}, None),
}
PR_SET_CHILD_SUBREAPER = 36
CLONE_PARENT = 0x00008000

_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06        # BPF_LD|W|ABS, BPF_JMP|...|K, BPF_RET|K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_NR, _ARCH, _ARG0 = 0, 4, 16           # offsets in struct seccomp_data (the low half of args[0], little endian)
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn))]


def program(machine: str) -> list[tuple[int, int, int, int]] | None:
    """The filter for `machine` (platform.machine()) as (code, jt, jf, k) instructions, None where there are no
    numbers for it. Jumps name labels, resolved below."""
    found = _ARCHES.get(machine.lower())
    if found is None:
        return None
    arch, nr, foreign = found
    code: list[tuple] = [
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 0, "enosys", arch),
        (_LD_ABS, 0, 0, _NR),
    ]
    if foreign is not None:
        code.append((_JGE, "enosys", 0, foreign))
    code += [
        (_JEQ, "enosys", 0, nr["clone3"]),
        (_JEQ, "prctl", 0, nr["prctl"]),
        (_JEQ, "clone", "allow", nr["clone"]),
        "prctl", (_LD_ABS, 0, 0, _ARG0),
        (_JEQ, "eperm", "allow", PR_SET_CHILD_SUBREAPER),
        "clone", (_LD_ABS, 0, 0, _ARG0),
        (_JSET, "eperm", "allow", CLONE_PARENT),
        "enosys", (_RET, 0, 0, _ERRNO | errno.ENOSYS),
        "eperm", (_RET, 0, 0, _ERRNO | errno.EPERM),
        "allow", (_RET, 0, 0, _ALLOW),
    ]
    return _resolved(code)


def _resolved(code: list) -> list[tuple[int, int, int, int]]:
    """`code` with its label strings taken out and each jump to a label made an offset from the next instruction."""
    labels, at = {}, 0
    for item in code:
        if isinstance(item, str):
            labels[item] = at
        else:
            at += 1
    insns = [item for item in code if not isinstance(item, str)]

    def offset(target: int | str, i: int) -> int:
        return target if isinstance(target, int) else labels[target] - i - 1
    return [(op, offset(jt, i), offset(jf, i), k) for i, (op, jt, jf, k) in enumerate(insns)]


def lock() -> str | None:
    """Install the filter on this process (all its threads); None when it holds, else why not (the sandbox
    report's `privileges.error`)."""
    if not sys.platform.startswith("linux"):
        return f"no process tree lock on {sys.platform}"
    machine = platform.machine()
    insns = program(machine)
    if insns is None:
        return f"no process tree lock for {machine}"
    table = (_Insn * len(insns))(*(_Insn(*i) for i in insns))
    prog = _Prog(len(insns), table)
    try:
        result = syscall(_ARCHES[machine.lower()][1]["seccomp"], ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
                         ctypes.c_uint(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    except OSError as exc:
        return f"process tree lock: seccomp: {errno.errorcode.get(exc.errno, exc.errno)}"
    if result > 0:                          # TSYNC: that thread could not be synchronised
        return f"process tree lock: thread {result} could not take the filter"
    return None
