"""harness.core.discover: a response's code block, a problem's static check."""
from __future__ import annotations

from conftest import REPO
from harness.core.discover import check_problem_source, extract_code_block


SEEDS = REPO / "solutions" / "level2"


def test_extract_last_complete_block_defining_modelnew():
    text = "intro\n```python\nclass ModelNew: a = 1\n```\nprose\n```python\nclass ModelNew: a = 2\n```\n"
    assert "a = 2" in extract_code_block(text)


def test_extract_ignores_a_cut_off_block():
    text = "```python\nclass ModelNew: a = 1\n```\n```python\nclass ModelNew: a = 2\n"
    assert "a = 1" in extract_code_block(text)


def test_extract_labelled_fence_reopens_after_stray_fences():
    text = "```\nstray prose\n```\nmore\n```\n```python\nclass ModelNew: a = 3\n```\n"
    assert extract_code_block(text).strip() == "class ModelNew: a = 3"


def test_extract_none_without_modelnew():
    assert extract_code_block("```python\ndef get_inputs(): pass\n```\n") is None
    assert extract_code_block("no code at all") is None


def test_seed_002_uses_its_first_block_because_the_second_is_cut_off():
    text = (SEEDS / "073_conv2d_batchnorm_scaling" / "seed_002.txt").read_text()
    block = extract_code_block(text)
    lines = text.splitlines()
    second_start = max(i for i, l in enumerate(lines) if l.strip() == "```python")
    assert block.strip().splitlines()[0] == lines[max(i for i, l in enumerate(lines[:second_start])
                                                        if l.strip() == "```python") + 1].strip()


def test_problem_check_names_what_is_missing(tmp_path):
    assert "no get_inputs" in check_problem_source(tmp_path / "p.py", "class Model: pass\ndef get_init_inputs(): pass")
    assert "syntax error" in check_problem_source(tmp_path / "p.py", "def (:")
    assert check_problem_source(tmp_path / "p.py", "class Model: pass\ndef get_inputs(): pass\n"
                                                   "def get_init_inputs(): pass") is None
