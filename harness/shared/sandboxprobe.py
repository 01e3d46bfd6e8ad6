"""What confinement a worker would get on this machine, probed without applying anything: the KB_SANDBOX mode,
the kernel's Landlock ABI, whether a user and network namespace can be made, and `describe()` of it all (run.json's
`sandbox`). The parent reads it here; the worker applies it (harness.worker.sandbox, which imports these)."""
from __future__ import annotations

import ctypes
import os
import platform
import sys
from typing import Any

MODE_VAR = "KB_SANDBOX"
MODES = ("auto", "off", "require")

# Landlock's syscalls have the same numbers on every architecture with the unified syscall table.
_SYSCALLS = {arch: (444, 445, 446) for arch in ("x86_64", "amd64", "aarch64", "arm64", "riscv64", "ppc64le",
                                                 "ppc64", "s390x", "loongarch64")}
_CREATE_RULESET_VERSION = 1 << 0
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_LIBC: Any = None


def mode() -> str:
    return (os.environ.get(MODE_VAR) or "auto").strip().lower()


def lib():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.syscall.restype = ctypes.c_long
    return _LIBC


def syscall(number: int, *args: Any) -> int:
    """The raw syscall; raises OSError with its errno on failure."""
    result = lib().syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def numbers() -> tuple[int, int, int] | None:
    return _SYSCALLS.get(platform.machine().lower()) if sys.platform.startswith("linux") else None


def landlock_abi() -> tuple[int | None, str | None]:
    """(Landlock ABI version, None), or (None, why not): not Linux, an architecture without the numbers here, a
    kernel without Landlock (ENOSYS), Landlock disabled at boot (EOPNOTSUPP), a seccomp filter refusing it."""
    calls = numbers()
    if calls is None:
        return None, f"no Landlock binding for {sys.platform}/{platform.machine()}"
    try:
        return syscall(calls[0], None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)), None
    except OSError as exc:
        return None, f"Landlock unavailable: {exc.strerror} (errno {exc.errno})"


def scoped(abi: int) -> list[str]:
    return ["abstract_unix_socket", "signal"] if abi >= 6 else []


_netns_probe: bool | None = None


def netns_possible() -> bool:
    """Whether this process could enter a new user + network namespace (tried in a forked child)."""
    global _netns_probe
    if _netns_probe is None:
        _netns_probe = False
        if sys.platform.startswith("linux"):
            try:
                pid = os.fork()
            except OSError:
                return False
            if pid == 0:
                ok = lib().unshare(ctypes.c_int(_CLONE_NEWUSER | _CLONE_NEWNET)) == 0
                os._exit(0 if ok else 1)
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:                   # reaped by someone else: no answer
                return False
            _netns_probe = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    return _netns_probe


def describe() -> dict[str, Any]:
    """What a confined worker gets on this machine under the current mode, without applying anything (for
    run.json)."""
    current = mode()
    abi, why = landlock_abi()
    linux = sys.platform.startswith("linux")
    info: dict[str, Any] = {"mode": current, "landlock_abi": abi, "filesystem": False, "network": False,
                            "network_via": None, "no_new_privs": False, "scoped": [], "reason": why}
    if current not in MODES:
        info["reason"] = f"{MODE_VAR}={current!r} is not one of {', '.join(MODES)}"
        return info
    if current == "off":
        info["reason"] = f"{MODE_VAR}=off"
        return info
    info["no_new_privs"] = linux
    if abi is not None:
        info.update(filesystem=True, scoped=scoped(abi))
        if abi >= 4:
            info.update(network=True, network_via="landlock (TCP)")
    if not info["network"] and linux and netns_possible():
        info.update(network=True, network_via="network namespace")
    return info
