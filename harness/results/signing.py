"""Signed records: every line of results.jsonl carries "hmac", an HMAC-SHA256 under a key of its run's own.

The key (32 bytes from os.urandom) is made when a run starts and kept outside the run folder, in
<cache_dir>/keys/<run_id>.key (directory 0700, file 0600); run.json names the file ("signing"), never the key.
Only the parent process holds it: workers are started with a whitelisted environment and exec, so they never get
it. A line is signed over its canonical JSON (sorted keys, no spaces, UTF-8) without the "hmac" field, so the same
bytes come out when the line is written and when it is read back."""
from __future__ import annotations

import enum
import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import InputError, UsageError
from harness.core.untrusted import ReadError, read_bytes, show_path

ALGORITHM = "hmac-sha256"
FIELD = "hmac"
KEY_BYTES = 32
KEY_FILE_LIMIT = 4096
DEFAULT_CACHE_DIR = ".cache"


class KeyFileError(InputError):
    """The run's key file is missing or unreadable (one line naming it)."""


@dataclass(frozen=True)
class RunKey:
    """A run's signing key and the file it lives in."""
    secret: bytes = field(repr=False)
    path: Path

    @staticmethod
    def keys_dir(cache_dir: str | Path) -> Path:
        """Where run keys live; confined workers see this folder empty (harness.worker.sandbox hides it)."""
        return Path(cache_dir).resolve() / "keys"

    @classmethod
    def path_for(cls, cache_dir: str | Path, run_id: str) -> Path:
        """A new key's file: the run id and a random part, since runs in other output folders share a cache and
        may draw the same run id in the same second."""
        return cls.keys_dir(cache_dir) / f"{run_id}-{os.urandom(4).hex()}.key"

    @classmethod
    def create(cls, cache_dir: str | Path, run_id: str) -> "RunKey":
        """A fresh key for a new run, written atomically to <cache_dir>/keys/<run_id>.key (0600, dir 0700)."""
        key = cls(os.urandom(KEY_BYTES), cls.path_for(cache_dir, run_id))
        try:
            _write_key_file(key.path, key.secret)
        except OSError as exc:
            raise UsageError(f"cache_dir {Path(cache_dir)}: cannot write the run's key file {key.path}: "
                             f"{exc.strerror or exc}") from None
        return key

    @classmethod
    def load(cls, path: str | Path) -> "RunKey":
        """The key in `path`; KeyFileError (one line) when it is missing, unreadable or not a key file."""
        path = Path(path)
        if not os.path.lexists(path):
            raise KeyFileError(f"key file {show_path(path)} is missing")
        try:                                            # run.json names it: never a FIFO, a device, a huge file
            text = read_bytes(path, KEY_FILE_LIMIT).decode("ascii").strip()
        except ReadError as exc:
            raise KeyFileError(f"key file {show_path(path)} cannot be read: {exc.why}") from None
        except ValueError:                              # not ASCII; a NUL in the path
            raise KeyFileError(f"key file {show_path(path)} is not a key file ({2 * KEY_BYTES} hex digits)") from None
        try:
            secret = bytes.fromhex(text)
        except ValueError:
            secret = b""
        if len(secret) != KEY_BYTES:
            raise KeyFileError(f"key file {show_path(path)} is not a key file ({2 * KEY_BYTES} hex digits)")
        return cls(secret, path)

    def record(self) -> dict[str, str]:
        """run.json's "signing": the algorithm and where the key lives (never the key)."""
        return {"algorithm": ALGORITHM, "key_file": str(self.path)}


def _write_key_file(path: Path, secret: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secret.hex() + "\n")
            f.flush()
            os.fsync(f.fileno())
        _publish(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _publish(tmp: Path, path: Path) -> None:
    """tmp becomes path atomically, never over an existing key (a hard link; a rename where there are none)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:
        if path.exists():
            raise FileExistsError(17, "File exists", str(path)) from None
        os.replace(tmp, path)


# ------------------------------------------------------------------------------------------------ lines


class Verdict(enum.Enum):
    VALID = "valid"
    BAD_SIGNATURE = "bad signature"
    UNSIGNED = "unsigned line in a signed run"
    NO_KEY = "no key to verify it"


def normalize(record: dict[str, Any]) -> dict[str, Any]:
    """The record as it reads back from its JSON line (tuples as lists, keys as strings, other objects as str):
    what is signed must be what is written."""
    return json.loads(json.dumps(record, default=str, allow_nan=False))


def canonical(record: dict[str, Any]) -> bytes:
    """The signed bytes: the record without its signature, keys sorted, no spaces, UTF-8."""
    body = {k: v for k, v in record.items() if k != FIELD}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def _secret(key: "RunKey | bytes") -> bytes:
    return key.secret if isinstance(key, RunKey) else bytes(key)


def sign(record: dict[str, Any], key: "RunKey | bytes") -> str:
    """HMAC-SHA256 (hex) of the record's canonical JSON. `record` is a JSON-parsed dict (see normalize)."""
    return hmac.new(_secret(key), canonical(record), hashlib.sha256).hexdigest()


def signed_line(record: dict[str, Any], key: "RunKey | bytes") -> bytes:
    """One results.jsonl line: the record, normalized, with its "hmac" as the last field."""
    body = {k: v for k, v in normalize(record).items() if k != FIELD}
    body[FIELD] = sign(body, key)
    return (json.dumps(body, allow_nan=False) + "\n").encode()


def verify_line(record: dict[str, Any], key: "RunKey | bytes | None") -> Verdict:
    """Whether a record read back from a line carries this run's signature."""
    if key is None:
        return Verdict.NO_KEY
    mac = record.get(FIELD)
    if mac is None:
        return Verdict.UNSIGNED
    if not isinstance(mac, str) or not hmac.compare_digest(mac.encode(), sign(record, key).encode()):
        return Verdict.BAD_SIGNATURE
    return Verdict.VALID


# ------------------------------------------------------------------------------------------------ a run's key


@dataclass(frozen=True)
class KeyLookup:
    """A run's key as its run.json names it: the key, or why its lines cannot be verified."""
    key: RunKey | None
    unverified_because: str | None = None
    names_key: bool = True                  # run.json names a key file (whether or not it could be read)
    meta_readable: bool = True              # run.json could be read at all


def key_file_of(meta: dict[str, Any] | None) -> str | None:
    """The key file run.json names, or None (a run recorded before records were signed)."""
    signing = (meta or {}).get("signing")
    if not isinstance(signing, dict) or signing.get("algorithm") != ALGORITHM:
        return None
    key_file = signing.get("key_file")
    return key_file if isinstance(key_file, str) and key_file else None


def lookup(meta: dict[str, Any] | None) -> KeyLookup:
    """The key of a run, from its run.json (None: no run.json), for reading its lines; never raises."""
    if meta is None:
        return KeyLookup(None, "the run.json beside it is missing or not JSON, so no signing key is known",
                         names_key=False, meta_readable=False)
    key_file = key_file_of(meta)
    if key_file is None:
        return KeyLookup(None, "its run.json names no signing key (a run from before records were signed)",
                         names_key=False)
    try:
        return KeyLookup(RunKey.load(key_file))
    except KeyFileError as exc:
        return KeyLookup(None, f"its {exc}")


def key_to_resume(meta: dict[str, Any], run_json: Path) -> RunKey:
    """The key a resumed run signs its new lines with; KeyFileError (exit 2, one line) when it cannot be had."""
    key_file = key_file_of(meta)
    if key_file is None:
        raise KeyFileError(f"{run_json}: names no signing key (a run from before records were signed); "
                           f"it cannot be resumed, start a new run")
    try:
        return RunKey.load(key_file)
    except KeyFileError as exc:
        raise KeyFileError(f"{run_json}: the run's {exc}; without it new lines cannot be signed nor old ones "
                           f"verified, so it cannot be resumed") from None
