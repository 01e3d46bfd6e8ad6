"""harness.shared.tensorfile: the raw output files a candidate's process writes and the trusted side reads."""
from __future__ import annotations

import pytest
import torch


def test_tensor_file_round_trip_keeps_dtype_shape_and_values(tmp_path):
    from harness.shared.tensorfile import read_tensors, write_tensors
    outs = [torch.randn(3, 5).t(), torch.tensor(2.5, dtype=torch.float64), torch.zeros(0, 4),
            torch.arange(9, dtype=torch.int64).view(3, 3), torch.tensor([True, False]),
            torch.randn(7).to(torch.bfloat16)]
    back = read_tensors(write_tensors(outs, str(tmp_path / "o.kbt")), "cpu")
    assert [(t.dtype, t.shape) for t in back] == [(t.dtype, t.shape) for t in outs]
    assert all(torch.equal(a, b) for a, b in zip(outs, back))


@pytest.mark.parametrize("mutate", ["truncate", "huge_header_length", "not_json", "bad_dtype", "shape_past_end"])
def test_tensor_file_written_by_candidate_code_is_checked(tmp_path, mutate):
    """The candidate's process writes the file, so a malformed one is a clear error, never a crash or a
    read outside the file."""
    import json
    import struct
    from harness.shared.tensorfile import TensorFileError, read_tensors, write_tensors
    path = tmp_path / "o.kbt"
    write_tensors([torch.ones(4, 4)], str(path))
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    def aligned(n):
        return (n + 63) // 64 * 64
    header, payload = json.loads(data[8:8 + length]), data[aligned(8 + length):]
    expected = {"truncate": "does not match", "huge_header_length": "header length", "not_json": "not JSON",
                "bad_dtype": "bad tensor entry", "shape_past_end": "does not match"}[mutate]
    if mutate == "truncate":
        data = data[:-16]
    elif mutate == "huge_header_length":
        data = struct.pack("<Q", 1 << 40) + data[8:]
    elif mutate == "not_json":
        data = data[:8] + b"{" * length + data[8 + length:]
    else:
        entry = header["tensors"][0]
        entry.update({"dtype": "object"} if mutate == "bad_dtype" else {"shape": [4, 4000], "nbytes": 64000})
        raw = json.dumps(header).encode()
        data = (struct.pack("<Q", len(raw)) + raw).ljust(aligned(8 + len(raw)), b" ") + payload
    path.write_bytes(data)
    with pytest.raises(TensorFileError, match=expected):
        read_tensors(str(path), "cpu")
