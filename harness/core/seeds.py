"""Seeds a candidate cannot predict. The run's base seed (weights, correctness trials) is drawn from os.urandom
unless `--seed N` fixes it. Timed samples and the positions where timed outputs are checked come from streams
keyed by a secret only the parent holds, drawn from os.urandom for every run, a fixed seed or not: a worker
learns a sample's seed when that sample starts, and a check's seed after the call returned. (A secret derived
from a fixed seed, as it once was, is one the candidate's process can derive too: it knows the base seed, the
stream's tags and this file, so it could compute every timed sample's inputs and outputs before timing began.)"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

SEED_LIMIT = 2 ** 31


@dataclass(frozen=True)
class RunSeed:
    base: int
    fixed: bool
    secret: bytes

    @classmethod
    def resolve(cls, seed: int | None) -> "RunSeed":
        if seed is not None:
            return cls(seed, True, os.urandom(32))
        return cls(int.from_bytes(os.urandom(4), "little") % SEED_LIMIT, False, os.urandom(32))

    @classmethod
    def resumed(cls, recorded: object, seed: int | None) -> "RunSeed":
        """A resumed run keeps its base seed (weights and trials); its sample streams get a new secret."""
        if isinstance(recorded, dict) and isinstance(recorded.get("base"), int):
            return cls(recorded["base"], bool(recorded.get("fixed")), os.urandom(32))
        return cls.resolve(seed)

    def stream(self, *tags: str) -> "SeedStream":
        """An independent stream of seeds for one purpose ('samples', problem, candidate, ...)."""
        text = "\0".join(tags).encode("utf-8", errors="surrogatepass")      # a name's undecodable bytes too
        return SeedStream(hashlib.sha256(self.secret + text).digest())

    def record(self) -> dict[str, object]:
        return {"base": self.base, "fixed": self.fixed}


class SeedStream:
    def __init__(self, key: bytes):
        self.key = key
        self.n = 0

    def next(self) -> int:
        digest = hashlib.sha256(self.key + self.n.to_bytes(8, "little")).digest()
        self.n += 1
        return int.from_bytes(digest[:4], "little") % SEED_LIMIT

    def take(self, count: int) -> list[int]:
        return [self.next() for _ in range(count)]
