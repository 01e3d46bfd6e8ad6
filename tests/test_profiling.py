"""harness.worker.profiling: whose kernels ran."""
from __future__ import annotations


def test_own_kernels_include_triton_kernels_compiled_by_the_pair(tmp_path):
    import json
    from harness.worker.profiling import kernel_base_name, triton_kernel_names
    entry = tmp_path / "triton" / "3f9a"
    entry.mkdir(parents=True)
    (entry / "fused_add_relu.json").write_text(json.dumps({"name": "fused_add_relu", "num_warps": 4}))
    (entry / "__grp__fused_add_relu.json").write_text(json.dumps({"child_paths": {}}))
    (entry / "broken.json").write_text("{not json")
    assert triton_kernel_names(str(tmp_path / "triton")) == {"fused_add_relu"}
    assert triton_kernel_names("") == set()
    assert kernel_base_name("fused_add_relu") == "fused_add_relu"
    assert kernel_base_name("void ns::scale_relu<float, 4>(float const*, int)") == "scale_relu"
