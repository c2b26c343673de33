"""Every kernels/*.cu compiles (for the visible GPU, or sm_90a without one) and its module imports."""
from pathlib import Path

import pytest

import helpers

pytestmark = pytest.mark.build
SOURCES = sorted(p.stem for p in Path(helpers.KERNELS_DIR).glob("*.cu"))


@pytest.mark.parametrize("name", SOURCES)
def test_kernel_builds_and_imports(name):
    module = helpers.load_kernel(name)
    functions = [n for n in dir(module) if not n.startswith("_")]
    assert functions, f"{name}: the extension exports no function"
    # A second load of an unchanged source comes from the cache.
    assert helpers.load_kernel(name) is module


def test_compiler_error_is_reported_readably(tmp_path, monkeypatch):
    (tmp_path / "broken.cu").write_text(
        "#include <torch/extension.h>\n__global__ void k() { undefined_symbol_here(); }\n"
        "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n")
    monkeypatch.setattr(helpers, "KERNELS_DIR", tmp_path)
    monkeypatch.setattr(helpers, "BUILD_DIR", tmp_path / "build")
    with pytest.raises(helpers.KernelBuildError) as info:
        helpers.load_kernel("broken")
    first_line = str(info.value).splitlines()[1]
    assert "undefined_symbol_here" in first_line and "error" in first_line
