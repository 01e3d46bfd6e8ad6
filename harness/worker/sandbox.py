"""Confinement of the workers that run candidate code (the `build` and `candidate` roles), Linux only.

A confined worker may write only beneath its own folders: the pair's scratch folder (where its output files for
the reference go), its build folder's extension directory (TORCH_EXTENSIONS_DIR: load_inline compiles and locks
there), its Triton cache and a private temporary folder (TMPDIR, made inside one of those). Besides those it may
write existing device files the runtime needs (/dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom,
/dev/tty, /dev/nvidia*, /dev/dri, /dev/kfd) and the files of its own /proc/<pid> (the CUDA driver names its
threads by writing /proc/<pid>/task/<tid>/comm, and cuInit fails with error 304 when it cannot). Everything else
stays readable (Python, torch, the CUDA toolkit, the problem and solution trees, the build cache) but is not
writable: not the run's output folder (results.jsonl, run.json, logs), not the rest of /dev/shm (other pairs'
scratch, the reference's state), not other candidates' builds, not the trees, not /tmp or $HOME.

How (each where the kernel has it; the worker reports what it actually applied):
  * Landlock (Linux >= 5.13, the ctypes binding below): only write-type accesses are handled (write, truncate,
    create, remove, rename/link across folders), so reading and executing stay as they were. ABI >= 5: ioctl on
    device files only on the device files above (not a loop device, whose kernel worker would copy for the
    candidate outside its cgroup; the CUDA driver's ioctls go to /dev/nvidia*, which are listed), except under
    Nsight Compute (below). ABI >= 4: TCP bind and
    connect are handled with no port allowed (no TCP at all; UDP is not covered); ABI >= 6: no signals to, and no
    abstract unix sockets of, processes outside the sandbox (the parent, the reference worker, other pairs).
  * PR_SET_NO_NEW_PRIVS: no setuid binary gives the worker or its children more rights.
  * A seccomp filter (harness.worker.treelock): every process it starts stays in its process tree.
  * Without Landlock's network rules (ABI < 4): a new user and network namespace (its only interface, loopback,
    is down) where the kernel lets an unprivileged process make one.
The restrictions hold for every thread created after them and every child process (fork, setsid, exec), and
cannot be lifted. They are applied when the job arrives (the paths come with it), before any candidate code or
CUDA runs; the worker is single-threaded then (a thread already running would keep its freedom: the report
counts such threads in `unconfined_threads`).

/proc/<pid>: a Landlock rule binds to an inode, and procfs makes a new inode for /proc/<pid> once its dentry has
been dropped (memory pressure, drop_caches), which would silently lose the rule: the worker keeps an O_PATH
descriptor of it open, which keeps the dentry. Only the worker's own entry is covered: a child process of a
candidate that initializes CUDA itself cannot name its threads.

Under Nsight Compute (`run_eval.py profile`: the parent sets KB_NCU to the port range ncu talks to its target
process on, and KB_NCU_TMP to the pair's ncu folder, which is also the TMPDIR that ncu and its injected library
start with) the same confinement is applied with what ncu's library needs inside the worker and nothing else
(`relaxed` in the report says what): TCP bind and connect on that port range only (Landlock ABI >= 4), or, below
ABI 4, no network namespace (ncu reaches its target over loopback); abstract unix sockets not scoped; ioctl on
every device file (not tried under ncu with the rule); KB_NCU_TMP
and ncu's lock file (/tmp/nsight-compute-lock, where it exists) writable. Threads the injected library started
before the job arrived stay unconfined (counted in `unconfined_threads`).

KB_SANDBOX selects the mode: `auto` (default: whatever the kernel allows), `off` (nothing is applied, for
debugging), `require` (a worker that cannot confine its filesystem writes refuses the job).
"""
from __future__ import annotations

import ctypes
import os
import shutil
import stat
import sys
import tempfile
from typing import Any

from harness.shared.sandboxprobe import (MODE_VAR, MODES, describe, landlock_abi, mode)
from harness.shared.sandboxprobe import lib as _lib, numbers as _numbers, scoped as _scoped, syscall as _syscall

ROLES = ("build", "candidate")          # the workers where candidate code runs


FS_WRITE_FILE = 1 << 1
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13                      # ABI 2
FS_TRUNCATE = 1 << 14                   # ABI 3
FS_IOCTL_DEV = 1 << 15                  # ABI 5
FS_FILE_RIGHTS = (1 << 0) | FS_WRITE_FILE | (1 << 2) | FS_TRUNCATE | FS_IOCTL_DEV   # what a rule on a file may hold
NET_BIND_TCP = 1 << 0                   # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0     # ABI 6
SCOPE_SIGNAL = 1 << 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_NO_NEW_PRIVS = 39
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18

# Device files a confined worker may still open for writing (top level of /dev; a folder counts with what is in
# it). Not /dev/shm: that is where other pairs' scratch lives.
DEVICE_NAMES = ("null", "zero", "full", "random", "urandom", "tty", "dri", "kfd")
DEVICE_PREFIXES = ("nvidia",)           # nvidiactl, nvidia0.., nvidia-uvm, nvidia-uvm-tools, nvidia-caps/


NCU_VAR = "KB_NCU"                      # "<base port>:<count>": the worker runs under ncu (run_eval.py profile)
NCU_TMP_VAR = "KB_NCU_TMP"
NCU_LOCK_FILES = ("/tmp/nsight-compute-lock",)   # ncu serializes concurrent profilers on it
_RULE_NET_PORT = 2


def ncu_ports() -> range | None:
    """The TCP ports ncu and its injected library use (KB_NCU), or None when the worker is not under ncu."""
    raw = os.environ.get(NCU_VAR) or ""
    try:
        base, count = (int(part) for part in raw.split(":", 1))
    except ValueError:
        return None
    return range(base, base + count) if 0 < base and 0 < count and base + count <= 65536 else None


class SandboxError(RuntimeError):
    """The sandbox was required (KB_SANDBOX=require) and cannot be applied, or KB_SANDBOX is not a mode."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_applied: dict[str, Any] | None = None  # what confine_worker applied in this process
_pinned: list[int] = []                 # the O_PATH fd that keeps /proc/<pid>'s dentry, and so its rule, alive
_remove_at_exit: list[str] = []


def handled_fs(abi: int) -> int:
    rights = (FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_CHAR | FS_MAKE_DIR | FS_MAKE_REG
              | FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_BLOCK | FS_MAKE_SYM)
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    return rights


def _writable_rights(abi: int) -> int:
    return handled_fs(abi) & ~(FS_MAKE_CHAR | FS_MAKE_BLOCK)


def _device_rights(abi: int) -> int:
    return FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0)


def applied() -> dict[str, Any] | None:
    """What confine_worker applied in this process (None before)."""
    return _applied


# ---------------------------------------------------------------- the worker's side

def worker_paths(role: str, job: dict[str, Any], environ: os._Environ | dict) -> tuple[list[str], str | None]:
    """(the folders a worker of `role` may write, the parent folder of its private temporary folder)."""
    ext = environ.get("TORCH_EXTENSIONS_DIR")
    if role == "candidate":
        scratch = job.get("scratch")
        writable = [p for p in (scratch, ext, environ.get("TRITON_CACHE_DIR")) if p]
        return writable, scratch or ext
    return [p for p in (ext,) if p], ext


def _private_tmp(parent: str | None) -> str | None:
    if not parent:
        return None
    parent = os.path.abspath(parent)            # TMPDIR must hold in a child that changes directory (the compiler)
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=".kb-tmp-", dir=parent)


def _use_tmp(tmp: str) -> None:
    """Point everything that writes temporary or cache files at the private folder, before the runtime reads its
    settings (the CUDA driver reads CUDA_CACHE_PATH at initialization, after confinement)."""
    for var in ("TMPDIR", "TMP", "TEMP"):
        os.environ[var] = tmp
    tempfile.tempdir = tmp
    os.environ["CUDA_CACHE_PATH"] = os.path.join(tmp, "nv")
    os.environ["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(tmp, "triton"))


def confine_worker(role: str, job: dict[str, Any]) -> dict[str, Any]:
    """Called by the worker when its job arrives, before anything of the candidate runs. Returns the report of
    what was applied; raises SandboxError under KB_SANDBOX=require when the filesystem cannot be confined."""
    global _applied
    current = mode()
    if current not in MODES:
        raise SandboxError(f"{MODE_VAR}={current!r} is not one of {', '.join(MODES)}")
    if current == "off":
        _applied = {"mode": "off", "landlock_abi": None, "filesystem": False, "network": False,
                    "network_via": None, "no_new_privs": False, "scoped": [], "writable": [], "hidden": [],
                    "error": None, "unconfined_threads": None, "privileges": drop_privileges()}
        return _applied
    writable, tmp_parent = worker_paths(role, job, os.environ)
    hide = [str(p) for p in job.get("hide") or [] if isinstance(p, str)]
    tmp = _private_tmp(tmp_parent)
    if tmp is not None:
        _use_tmp(tmp)
        writable.append(tmp)
        if tmp_parent != job.get("scratch"):    # a pair's scratch is removed by the parent
            _remove_at_exit.append(tmp)
    ports = ncu_ports()
    if ports is not None and os.environ.get(NCU_TMP_VAR):
        writable.append(os.environ[NCU_TMP_VAR])
    for path in writable:
        os.makedirs(path, exist_ok=True)
    _applied = confine(writable, require=current == "require", hide=hide, ncu=ports, device_ioctl=ports is not None)
    _applied["mode"] = current
    _applied["privileges"] = drop_privileges()      # last: the private mount namespace needed CAP_SYS_ADMIN
    _lock_tree(_applied["privileges"])
    return _applied


def _lock_tree(report: dict[str, Any]) -> None:
    """Every process the worker starts stays in its tree (harness.worker.treelock), said in the privileges report:
    `tree_locked`, and why not in its `error`."""
    from harness.worker import treelock
    why = treelock.lock()
    report["tree_locked"] = why is None
    if why:
        report["error"] = "; ".join(x for x in (report.get("error"), why) if x)


# Every capability, by number (linux/capability.h): a worker that runs candidate code needs none of them once its
# confinement is in place, and as root it would hold them all. With SYS_NICE it could raise its own priority over
# the other side, with SYS_PTRACE act on the reference's process, with SYS_ADMIN undo its confinement, with
# SYS_RESOURCE lift its limits; with SYS_TIME it slewed the clock every process of the machine reads, the parent's
# included (adjtimex ADJ_TICK: slow while its call ran, fast while the reference's did; a red team's read `ok` at
# 1.11-1.21x); with DAC_READ_SEARCH it could open files by handle past the mount namespace that hides the run's
# keys; SYS_MODULE, SYS_BOOT, SYS_RAWIO, BPF and the rest reach the machine itself. So every capability the kernel
# knows (cap_last_cap) is dropped, as a worker of an ordinary user never had them (one newer than CAPS by number).
CAPS = ("CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
        "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
        "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
        "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
        "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
        "CHECKPOINT_RESTORE")
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAP_VERSION_3 = 0x20080522


def last_cap() -> int:
    """The highest capability number this kernel knows (/proc/sys/kernel/cap_last_cap; CAPS' last where unreadable)."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return min(int(f.read()), 63)
    except (OSError, ValueError):
        return len(CAPS) - 1


def cap_name(cap: int) -> str:
    return f"CAP_{CAPS[cap]}" if cap < len(CAPS) else f"CAP_{cap}"


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges() -> dict[str, Any]:
    """No raising of its own priority, no acting on other processes or on the machine: RLIMIT_RTPRIO and RLIMIT_NICE
    set to 0 (no real-time policy, no nice below 0 without CAP_SYS_NICE), then every capability taken out of this
    thread's bounding, effective, permitted, inheritable and ambient sets, so that nothing it starts gets one back.
    Threads that exist already keep theirs (the report's `unconfined_threads` counts them); candidate code runs on
    this one and on those it starts. What was done, for the sandbox report (`dropped`: the capabilities' names)."""
    import resource
    report: dict[str, Any] = {"dropped": [], "rlimit_rtprio": None, "rlimit_nice": None, "error": None}
    errors = []
    for name, limit in (("rlimit_rtprio", resource.RLIMIT_RTPRIO), ("rlimit_nice", resource.RLIMIT_NICE)):
        try:
            resource.setrlimit(limit, (0, 0))
            report[name] = 0
        except (OSError, ValueError) as exc:
            errors.append(f"{name}: {exc}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    known = range(last_cap() + 1)
    for cap in known:
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            errors.append(f"bounding set {cap_name(cap)}: {os.strerror(ctypes.get_errno())}")
    header, data = _CapHeader(_CAP_VERSION_3, 0), (_CapData * 2)()     # caps 0-31, then 32-63
    if libc.capget(ctypes.byref(header), data) != 0:
        errors.append(f"capget: {os.strerror(ctypes.get_errno())}")
    else:
        for word in data:
            word.effective = word.permitted = word.inheritable = 0
        if libc.capset(ctypes.byref(header), data) != 0:
            errors.append(f"capset: {os.strerror(ctypes.get_errno())}")
        else:
            report["dropped"] = sorted(cap_name(cap) for cap in known)
    report["error"] = "; ".join(errors) or None
    return report


def cleanup() -> None:
    """Remove the private temporary folders this worker made outside its scratch (at the worker's exit)."""
    for path in _remove_at_exit:
        shutil.rmtree(path, ignore_errors=True)
    _remove_at_exit.clear()


def confine(writable: list[str], require: bool = False, max_abi: int | None = None,
            hide: list[str] | tuple[str, ...] = (), ncu: range | None = None,
            device_ioctl: bool = False) -> dict[str, Any]:
    """Confine this process (and all it starts from now on) to writing beneath `writable`, the device files above
    and its own /proc/<pid>; no TCP; the folders in `hide` (the run keys) seen empty. `max_abi` pretends the kernel
    has at most that Landlock ABI (tests). `ncu`: the worker runs under Nsight Compute, which talks to it on these
    TCP ports (the module's docstring: what is relaxed, said in the report's `relaxed`). `device_ioctl` False (the
    default, every worker but one under ncu; Landlock ABI >= 5): ioctl only on the device files above."""
    report: dict[str, Any] = {"mode": "require" if require else "auto", "landlock_abi": None, "filesystem": False,
                              "network": False, "network_via": None, "no_new_privs": False, "scoped": [],
                              "device_ioctl": "open",
                              "writable": [os.path.realpath(p) for p in writable], "hidden": [], "error": None,
                              "unconfined_threads": _threads() - 1}
    errors: list[str] = []
    abi, why = landlock_abi()
    if abi is not None and max_abi is not None:
        abi = min(abi, max_abi)
    report["landlock_abi"] = abi
    if why:
        errors.append(why)
    if require and abi is None:
        raise SandboxError(f"{MODE_VAR}=require: {why}")
    if sys.platform.startswith("linux"):
        if _lib().prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0),
                        ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0:
            report["no_new_privs"] = _lib().prctl(ctypes.c_int(_PR_GET_NO_NEW_PRIVS), ctypes.c_ulong(0),
                                                  ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) == 1
        else:
            errors.append(f"PR_SET_NO_NEW_PRIVS: {os.strerror(ctypes.get_errno())}")
    relaxed = _ncu_relaxed(ncu, abi, writable, device_ioctl) if ncu is not None else []
    if relaxed:
        report["relaxed"] = relaxed
    network_ns = (abi is None or abi < 4) and sys.platform.startswith("linux") and ncu is None
    hide = [os.path.realpath(p) for p in hide if os.path.isdir(p)] if sys.platform.startswith("linux") else []
    if network_ns or hide:
        try:                                    # before Landlock: the uid map is written through /proc/self
            _enter_namespaces(network_ns, hide)
            if network_ns:
                report.update(network=True, network_via="network namespace")
            report["hidden"] = hide
        except OSError as exc:
            errors.append(f"no {'network' if network_ns else 'mount'} namespace: {exc.strerror or exc}")
    if abi is not None:
        try:
            ioctl = not device_ioctl and abi >= 5
            _landlock(abi, writable, ncu, ioctl)
            report.update(filesystem=True, scoped=[k for k in _scoped(abi)
                                                   if ncu is None or k != "abstract_unix_socket"])
            if ioctl:
                report["device_ioctl"] = "listed devices only"
            if abi >= 4:
                report.update(network=True, network_via="landlock (TCP)")
        except OSError as exc:
            if require:
                raise SandboxError(f"{MODE_VAR}=require: Landlock failed: {exc.strerror or exc}") from None
            errors.append(f"Landlock failed: {exc.strerror or exc}")
    report["error"] = "; ".join(errors) or None
    return report


def _ncu_relaxed(ports: range, abi: int | None, writable: list[str], device_ioctl: bool) -> list[str]:
    """What confinement leaves open for Nsight Compute (the report's `relaxed`)."""
    said = [f"ncu: TCP bind/connect on ports {ports.start}-{ports.stop - 1}" if abi is not None and abi >= 4 else
            "ncu: no network namespace (ncu reaches its target over loopback)"]
    if device_ioctl and abi is not None and abi >= 5:
        said.append("ncu: ioctl on every device file")
    if abi is not None and abi >= 6:
        said.append("ncu: abstract unix sockets not scoped")
    tmp = os.environ.get(NCU_TMP_VAR)
    if tmp and tmp in writable:
        said.append(f"ncu: writable {os.path.realpath(tmp)}")
    said += [f"ncu: writable {path}" for path in NCU_LOCK_FILES if os.path.isfile(path)]
    return said


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _enter_namespaces(network: bool, hide: list[str]) -> None:
    """`network`: a new user namespace (mapping only our own uid and gid) holding a new network namespace: no
    interface is up, so nothing can be reached, not even 127.0.0.1. `hide`: a private mount namespace (with a user
    namespace unless we are root) where each folder is covered by an empty read-only tmpfs; under Landlock the
    process can no longer change the mount topology, so it cannot uncover them. Needs a single-threaded process."""
    user = network or os.geteuid() != 0
    flags = (_CLONE_NEWNET if network else 0) | (_CLONE_NEWNS if hide else 0) | (_CLONE_NEWUSER if user else 0)
    uid, gid = os.getuid(), os.getgid()
    if _lib().unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    if user:
        _map_ids(uid, gid)
    if hide:
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)     # nothing done here reaches the parent's mounts
        for path in hide:
            _mount("kb-hidden", path, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=4k,mode=0")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = (lambda v: v.encode() if v is not None else None)
    if _lib().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount on {target}: {os.strerror(err)}")


def _map_ids(uid: int, gid: int) -> None:
    # From here on a failure leaves us in the namespace with no uid mapped (files then belong to "nobody" and
    # writes to our own folders fail): the writes below are to our own fresh namespace and do not fail in practice.
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        try:
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        except FileNotFoundError:               # setgroups: kernels before 3.19
            continue


def _add_rule(ruleset: int, path: str, access: int, abi: int) -> bool:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= FS_FILE_RIGHTS
        if not access:
            return False
        attr = _PathBeneathAttr(access, fd)
        _syscall(_numbers()[1], ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(attr),
                 ctypes.c_uint32(0))
        return True
    finally:
        os.close(fd)


def _device_paths() -> list[str]:
    try:
        names = sorted(os.listdir("/dev"))
    except OSError:
        return []
    return [f"/dev/{n}" for n in names if n in DEVICE_NAMES or n.startswith(DEVICE_PREFIXES)]


def _landlock(abi: int, writable: list[str], ncu: range | None = None, ioctl: bool = False) -> None:
    """`ioctl` (ABI >= 5): ioctl on device files handled too, allowed on the listed devices only (_device_paths), so
    that a candidate cannot drive a kernel device to work for it outside its processes: a red team attached the
    inputs' memfd to a loop device, whose kernel worker copied from it outside the worker's cgroup (CPU time no
    check counted: docs/measurements.md, twenty-fifth session)."""
    create, add, restrict = _numbers()
    scope = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0
    if ncu is not None:
        scope &= ~SCOPE_ABSTRACT_UNIX_SOCKET
    handled = handled_fs(abi) | (FS_IOCTL_DEV if ioctl else 0)
    attr = _RulesetAttr(handled, (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0, scope)
    size = 8 if abi < 4 else 16 if abi < 6 else 24   # the struct as this ABI knows it
    ruleset = _syscall(create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        for path in writable:
            if not _add_rule(ruleset, path, _writable_rights(abi), abi):
                raise OSError(2, f"cannot add a rule for {path}")
        for path in _device_paths():
            _add_rule(ruleset, path, _device_rights(abi) | (FS_IOCTL_DEV if ioctl else 0), abi)
        if ncu is not None:
            for path in NCU_LOCK_FILES:
                if os.path.isfile(path):
                    _add_rule(ruleset, path, _device_rights(abi), abi)
            for port in ncu if abi >= 4 else ():
                rule = _NetPortAttr(NET_BIND_TCP | NET_CONNECT_TCP, port)
                _syscall(add, ctypes.c_int(ruleset), ctypes.c_int(_RULE_NET_PORT), ctypes.byref(rule),
                         ctypes.c_uint32(0))
        own = f"/proc/{os.getpid()}"
        if _add_rule(ruleset, own, _device_rights(abi), abi):      # write and truncate: open(..., "w")
            try:
                _pinned.append(os.open(own, os.O_PATH | os.O_CLOEXEC))
            except OSError:
                pass
        _syscall(restrict, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
