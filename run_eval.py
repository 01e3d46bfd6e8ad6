#!/usr/bin/env python3
"""Evaluate candidate kernels against reference problems. See README.md, or `python run_eval.py --help`."""
import sys

from harness.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
