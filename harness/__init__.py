"""KernelBench-style harness: discover, build, execute, verify, time, store, report."""

SCHEMA_VERSION = 2
