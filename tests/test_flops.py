"""harness.worker.flops counts what torch's FlopCounterMode counts, without importing torch._dynamo."""
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn


def _cases():
    torch.manual_seed(0)
    return [
        (nn.Linear(64, 32), [torch.randn(8, 64)]),
        (nn.Conv2d(3, 8, 3), [torch.randn(2, 3, 16, 16)]),
        (nn.ConvTranspose2d(4, 4, 3), [torch.randn(1, 4, 8, 8)]),
        (nn.MultiheadAttention(32, 4, batch_first=True), [torch.randn(2, 5, 32)] * 3),
        (nn.GRU(8, 8), [torch.randn(3, 2, 8)]),
        (lambda a, b: torch.bmm(a, b).relu(), [torch.randn(2, 4, 5), torch.randn(2, 5, 3)]),
        (lambda x: torch.nn.functional.gelu(x) * 2, [torch.randn(16)]),
    ]


@pytest.mark.parametrize("index", range(7))
def test_counts_match_flop_counter_mode(index):
    from torch.utils.flop_counter import FlopCounterMode
    from harness.worker import flops
    fn, args = _cases()[index]
    expected = FlopCounterMode(display=False)
    with torch.no_grad(), expected:
        fn(*args)
    with torch.no_grad():
        assert flops.count(fn, *args) == expected.get_total_flops()


def test_counting_imports_no_dynamo():
    code = ("import sys, torch\nfrom harness.worker import flops\n"
            "assert flops.count(torch.nn.Linear(4, 4), torch.randn(2, 4)) == 64\n"
            "print(any(m.startswith('torch._dynamo') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
