"""What can be verified about the Metal backend on a machine without Apple hardware.

1. R5 lint: every Objective-C touch in objc/ is inside @autoreleasepool (and the lint can fail).
2. objc/*.mm compile as Objective-C++ with ARC against declaration stubs of the SDK (clang), and
   objc/CMakeLists.txt builds the static library tl_metal from them (code generated, not linked).
   The same code, linked with a fake Objective-C runtime and fake Metal (objc/tests/fake_metal/),
   runs every Kernels method against the CPU kernels, the error paths, a 10,000-command-buffer
   loop and teardown, counting objects autoreleased with no pool in place; and a _core module
   built over it passes the project's cross-backend suite with TL_CROSS_BACKEND=metal.
3. shaders/*.metal and the embedded single-unit source compile as C++ with a Metal shim (clang).
4. Every Kernels method has a Metal override and a shader kernel naming its CPU twin, and every
   pipeline name the host asks for exists as a kernel.
5. The shader kernels themselves, compiled against the shim and run on the CPU with real
   threadgroup barriers (shaders/check/shim_executor.cpp), match NumPy and the gguf package.
None of this runs Metal: the backend has never been executed on Apple hardware by this project.
On macOS the last test also runs objc/tests/test_metal_on_mac.py (every op against the CPU
backend under Metal API validation, a flat 10,000-matmul loop, run-time errors, teardown).
"""
from __future__ import annotations

import ctypes
import math
import os
import re
import shutil
import subprocess
import sys
from ctypes import c_float, c_int32, c_int64, c_uint32, c_void_p
from pathlib import Path

import numpy as np
import pytest

from tensorlogic.models.testing import random_quant_blocks

ROOT = Path(__file__).resolve().parents[2]
OBJC = ROOT / "objc"
SHADERS = ROOT / "shaders"
CLANG = shutil.which("clang++")
needs_clang = pytest.mark.skipif(
    CLANG is None, reason="clang++ not installed (apt-get install clang); the Metal syntax "
                          "checks and the shader execution tests need it")


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


# ---- 1. autorelease-pool lint ----------------------------------------------------------------

def test_objc_sources_keep_every_objective_c_touch_inside_an_autorelease_pool():
    result = run([sys.executable, str(OBJC / "check_autoreleasepool.py")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 violations" in result.stdout
    touches = int(re.search(r"(\d+) Objective-C touches", result.stdout).group(1))
    assert touches >= 50  # the lint really saw the backend's message sends and members


LINT_HEADER = """
#import <Metal/Metal.h>
class Holder {
 public:
  void good();
  void bad_member();
 private:
  id<MTLBuffer> buffer_ = nil;
  __unsafe_unretained id<MTLBuffer> borrowed_ = nil;
};
"""

LINT_CASES = {
    "send_outside_pool": ("void f(id<MTLDevice> d) { [d newCommandQueue]; }", "message send"),
    "block_without_pool": (
        "void f(id<MTLCommandBuffer> cb) {\n  @autoreleasepool {\n"
        "    [cb addCompletedHandler:^(id<MTLCommandBuffer> done) { [done status]; }];\n  }\n}",
        "block body must begin with @autoreleasepool"),
    "owning_member_release": (
        "void Holder::bad_member() { buffer_ = nil; }", "owning member buffer_"),
    "c_function_outside_pool": (
        "void f() { id<MTLDevice> d = MTLCreateSystemDefaultDevice(); (void)d; }",
        "MTLCreateSystemDefaultDevice()"),
    "lambda_inside_pool_runs_later": (
        "void f(id<MTLDevice> d) {\n  @autoreleasepool {\n"
        "    auto later = [d] { return [d newCommandQueue]; };\n    (void)later;\n  }\n}",
        "message send"),
}


@pytest.mark.parametrize("case", sorted(LINT_CASES))
def test_autorelease_lint_reports_each_kind_of_violation(tmp_path, case):
    body, expected = LINT_CASES[case]
    (tmp_path / "holder.h").write_text(LINT_HEADER)
    (tmp_path / "bad.mm").write_text('#include "holder.h"\n' + body + "\n")
    result = run([sys.executable, str(OBJC / "check_autoreleasepool.py"),
                  str(tmp_path / "holder.h"), str(tmp_path / "bad.mm")])
    assert result.returncode == 1, result.stdout
    assert expected in result.stdout
    assert "bad.mm:" in result.stdout


def test_autorelease_lint_accepts_pooled_code_and_ignores_subscripts_and_borrowed_members(tmp_path):
    (tmp_path / "holder.h").write_text(LINT_HEADER)
    (tmp_path / "good.mm").write_text(
        '#include "holder.h"\n'
        "[[noreturn]] void fail();\n"
        "int sum(const int* v) { int a[2] = {v[0], v[1]}; return a[0] + a[1]; }\n"
        "void Holder::good() {\n"
        "  (void)borrowed_;\n"
        "  @autoreleasepool {\n"
        "    buffer_ = nil;\n"
        "    [borrowed_ contents];\n"
        "  }\n"
        "}\n"
        "void g(id<MTLCommandBuffer> cb) {\n"
        "  @autoreleasepool {\n"
        "    [cb addCompletedHandler:^(id<MTLCommandBuffer> done) {\n"
        "      @autoreleasepool { [done status]; }\n"
        "    }];\n"
        "  }\n"
        "}\n")
    result = run([sys.executable, str(OBJC / "check_autoreleasepool.py"),
                  str(tmp_path / "holder.h"), str(tmp_path / "good.mm")])
    assert result.returncode == 0, result.stdout
    # buffer_ = nil, [borrowed_ contents], [cb addCompletedHandler:], the block, [done status]
    assert "5 Objective-C touches" in result.stdout


# ---- 2, 3. clang syntax checks ---------------------------------------------------------------

@needs_clang
def test_objective_c_sources_compile_with_arc_against_the_sdk_stubs():
    result = run(["bash", str(OBJC / "tests" / "check_objc_syntax.sh")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check_objc_syntax: ok" in result.stdout


@needs_clang
def test_shaders_compile_as_cpp_with_the_metal_shim():
    if shutil.which("cmake") is None:
        pytest.skip("cmake not installed; the embedded-unit check needs it")
    result = run(["bash", str(SHADERS / "check" / "check_shaders.sh")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check_shaders: ok" in result.stdout


@needs_clang
def test_tl_metal_library_builds_with_its_cmakelists_against_the_sdk_stubs(tmp_path):
    if shutil.which("cmake") is None:
        pytest.skip("cmake not installed")
    result = run(["bash", str(OBJC / "tests" / "check_cmake_build.sh"), str(tmp_path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check_cmake_build: ok" in result.stdout


@needs_clang
@pytest.mark.skipif(sys.platform != "linux" or __import__("platform").machine() != "x86_64",
                    reason="the fake Objective-C runtime's objc_msgSend is x86-64 Linux assembly")
def test_objc_backend_runs_against_a_fake_metal_and_matches_the_cpu_twin(tmp_path):
    # objc/*.mm compiled for the macOS Objective-C ABI, linked with objc/tests/fake_metal/ (a
    # minimal Objective-C runtime and Metal), the shader kernels running through the shim: every
    # Kernels method against the CPU kernels, errors, a 10,000-command-buffer loop, teardown to
    # zero objects, and no autorelease without a pool.
    if shutil.which("cmake") is None or shutil.which("g++") is None:
        pytest.skip("cmake and g++ are needed to build the fake-Metal test")
    result = run(["bash", str(OBJC / "tests" / "fake_metal" / "run_fake_metal_tests.sh"),
                  str(tmp_path)])
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    summary = re.search(r"(\d+) passed, (\d+) failed", result.stdout)
    assert summary and int(summary.group(1)) >= 90 and summary.group(2) == "0", result.stdout[-3000:]


@needs_clang
@pytest.mark.skipif(sys.platform != "linux" or __import__("platform").machine() != "x86_64",
                    reason="the fake Objective-C runtime's objc_msgSend is x86-64 Linux assembly")
def test_project_cross_backend_suite_passes_on_the_metal_backend_over_fake_metal(tmp_path):
    # tensorlogic._core built with TL_HAVE_METAL from the real runtime, bindings and objc/, over
    # the fake Objective-C runtime and Metal; then the project's own cross-backend suite
    # (tests/runtime/test_backend_ops.py: every op through the Python API against the CPU
    # backend, memory back to baseline) runs with TL_CROSS_BACKEND=metal.
    suite = ROOT / "tests" / "runtime" / "test_backend_ops.py"
    if not suite.exists():
        pytest.skip("tests/runtime/test_backend_ops.py is not in this tree")
    for tool in ("cmake", "g++"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is needed to build the fake-Metal module")
    pytest.importorskip("pybind11")
    build = run(["bash", str(OBJC / "tests" / "fake_metal" / "build_fake_metal_core.sh"), str(tmp_path)])
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "stage"), TL_CROSS_BACKEND="metal")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert re.search(r"\b\d+ passed", result.stdout) and "skipped" not in result.stdout.splitlines()[-1]


# ---- 4. twins ----------------------------------------------------------------------------------

def kernels_interface_methods() -> set[str]:
    text = (ROOT / "cpp" / "runtime" / "kernels.h").read_text()
    return set(re.findall(r"virtual void (\w+)\([^;]*\)\s*=\s*0;", text, re.S))


def test_metal_kernels_override_every_kernels_method():
    interface = kernels_interface_methods()
    assert len(interface) >= 18
    metal = set(re.findall(r"void (\w+)\([^;]*\)\s*override;", (OBJC / "metal_kernels.h").read_text(), re.S))
    assert interface == metal


def test_every_kernels_method_has_a_shader_naming_its_cpu_twin_and_the_twin_exists():
    interface = kernels_interface_methods()
    twins: dict[str, str] = {}
    for shader in SHADERS.glob("*.metal"):
        text = shader.read_text()
        for twin, kernel in re.findall(r"// CPU twin: Kernels::(\w+)[^\n]*\n(?://[^\n]*\n)*kernel void (\w+)", text):
            twins[kernel] = twin
    assert set(twins.values()) == interface
    cpu_dir = ROOT / "cpp" / "backends" / "cpu"
    cpu_text = "".join(p.read_text() for p in cpu_dir.glob("*.cpp"))
    for twin in interface:
        assert re.search(rf"void CpuKernels::{twin}\(", cpu_text), f"no CPU twin for {twin}"


def test_every_pipeline_the_host_requests_exists_as_a_kernel_and_none_is_unused():
    requested = set(re.findall(r'pipeline\("(\w+)"', (OBJC / "metal_kernels.mm").read_text()))
    defined = set()
    for shader in SHADERS.glob("*.metal"):
        defined |= set(re.findall(r"kernel void (\w+)\(", shader.read_text()))
    assert requested == defined


def kernel_signatures() -> dict[str, str]:
    signatures = {}
    for shader in SHADERS.glob("*.metal"):
        for name, params in re.findall(r"kernel void (\w+)\((.*?)\)\s*\{", shader.read_text(), re.S):
            signatures[name] = params
    return signatures


def test_position_attributes_of_each_kernel_share_one_vector_width():
    # An MSL rule the C++ shim cannot see: grid/threadgroup position arguments of one kernel are
    # all scalars or all vectors with the same number of components.
    for name, params in kernel_signatures().items():
        widths = {t for t, attr in re.findall(
            r"\b(uint[23]?)\s+\w+\s*\[\[(thread\w*|threadgroup\w*)\]\]", params)}
        assert len(widths) <= 1, f"{name} mixes {sorted(widths)}"


def test_host_binds_exactly_the_buffer_slots_each_kernel_declares():
    source = (OBJC / "metal_kernels.mm").read_text()
    methods = re.split(r"\nvoid MetalKernels::", source)[1:]
    checked = 0
    signatures = kernel_signatures()
    for body in methods:
        pipelines = re.findall(r'pipeline\("(\w+)"', body)
        if not pipelines:
            continue
        bound = {int(i) for i in re.findall(r"bind\(\w+, (\d+),", body)}
        bound |= {int(i) for i in re.findall(r"\.index = (\d+);", body)}
        for kernel in pipelines:  # a method may choose between kernels of one signature
            declared = {int(i) for i in re.findall(r"\[\[buffer\((\d+)\)\]\]", signatures[kernel])}
            assert declared - {0} == bound, f"{kernel}: kernel {sorted(declared)} vs host {sorted(bound)}"
            assert 0 in declared  # params always come through setBytes at index 0
        checked += 1
    assert checked == len(kernels_interface_methods())


# ---- 5. shader kernels executed on the CPU through the shim -------------------------------------

F32, F16, BF16, I32, I64, BOOL = 0, 1, 2, 3, 4, 5
QTYPES = {"q4_0": 6, "q4_1": 7, "q5_0": 8, "q5_1": 9, "q8_0": 10, "q4_k": 11, "q5_k": 12, "q6_k": 13}
NP_CODE = {np.dtype(np.float32): F32, np.dtype(np.float16): F16, np.dtype(np.int32): I32,
           np.dtype(np.int64): I64, np.dtype(np.bool_): BOOL}


class ViewDesc(ctypes.Structure):
    _fields_ = [("shape", c_int64 * 8), ("strides", c_int64 * 8), ("ndim", c_int32),
                ("dtype", c_int32)]


class ElementwiseParams(ctypes.Structure):
    _fields_ = [("a", ViewDesc), ("b", ViewDesc), ("c", ViewDesc), ("n", c_int64),
                ("scalar_i", c_int64), ("scalar_f", c_float), ("op", c_int32),
                ("out_dtype", c_int32), ("float_compute", c_int32), ("scalar_first", c_int32),
                ("pad0", c_int32)]


class CopyParams(ctypes.Structure):
    _fields_ = [("src", ViewDesc), ("dst", ViewDesc), ("n", c_int64), ("value_i", c_int64),
                ("step_i", c_int64), ("value_f", c_float), ("step_f", c_float),
                ("integer_compute", c_int32), ("exact_integers", c_int32)]


class ReduceParams(ctypes.Structure):
    _fields_ = [("outer", c_int64), ("n", c_int64), ("inner", c_int64), ("op", c_int32),
                ("in_dtype", c_int32), ("out_dtype", c_int32), ("integer_compute", c_int32)]


class MatmulParams(ctypes.Structure):
    _fields_ = [("a", ViewDesc), ("b", ViewDesc), ("batch", c_int64), ("m", c_int64),
                ("n", c_int64), ("k", c_int64), ("out_dtype", c_int32), ("pad0", c_int32)]


class RowsParams(ctypes.Structure):
    _fields_ = [("m", c_int64), ("n", c_int64), ("k", c_int64), ("row_bytes", c_int64),
                ("w_dtype", c_int32), ("ids_dtype", c_int32), ("out_dtype", c_int32),
                ("pad0", c_int32)]


class ExpertParams(ctypes.Structure):
    _fields_ = [("pairs", c_int64), ("n", c_int64), ("k", c_int64), ("row_bytes", c_int64),
                ("experts", c_int64), ("topk", c_int64), ("x_rows", c_int64), ("w_dtype", c_int32),
                ("ids_dtype", c_int32)]


class NormParams(ctypes.Structure):
    _fields_ = [("rows", c_int64), ("d", c_int64), ("eps", c_float), ("x_dtype", c_int32),
                ("out_dtype", c_int32), ("w_dtype", c_int32), ("b_dtype", c_int32),
                ("pad0", c_int32)]


class AttentionParams(ctypes.Structure):
    _fields_ = [("q", ViewDesc), ("k", ViewDesc), ("v", ViewDesc), ("mask", ViewDesc),
                ("sq", c_int64), ("sk", c_int64), ("hq", c_int64), ("hkv", c_int64),
                ("d", c_int64), ("q_pos_offset", c_int64), ("mask_cols", c_int64),
                ("scale", c_float), ("causal", c_int32), ("has_mask", c_int32), ("softcap", c_float)]


class RopeParams(ctypes.Structure):
    _fields_ = [("outer", c_int64), ("seq", c_int64), ("heads", c_int64), ("d", c_int64),
                ("pos_offset", c_int64), ("x_dtype", c_int32), ("out_dtype", c_int32),
                ("neox", c_int32), ("pad0", c_int32), ("freq_hi", c_float * 256),
                ("freq_lo", c_float * 256)]


class FusedLinearParams(ctypes.Structure):
    _fields_ = [("addend", ViewDesc), ("m", c_int64), ("n", c_int64), ("k", c_int64), ("row_bytes", c_int64),
                ("eps", c_float), ("w_dtype", c_int32), ("nw_dtype", c_int32), ("prologue", c_int32),
                ("has_addend", c_int32), ("phase", c_int32)]


class RopeKVParams(ctypes.Structure):
    _fields_ = [("q", ViewDesc), ("k", ViewDesc), ("v", ViewDesc), ("k_dst", ViewDesc), ("v_dst", ViewDesc),
                ("seq", c_int64), ("hq", c_int64), ("hkv", c_int64), ("d", c_int64), ("pos_offset", c_int64),
                ("neox", c_int32), ("pad0", c_int32), ("freq_hi", c_float * 256), ("freq_lo", c_float * 256)]


class OptimizerParams(ctypes.Structure):
    _fields_ = [("n", c_int64), ("step", c_float), ("decay", c_float), ("weight_decay", c_float),
                ("beta1", c_float), ("one_minus_beta1", c_float), ("beta2", c_float),
                ("one_minus_beta2", c_float), ("bias2", c_float), ("eps", c_float), ("momentum", c_float),
                ("kind", c_int32), ("decoupled", c_int32), ("nesterov", c_int32), ("has_m", c_int32)]


class DelayParams(ctypes.Structure):
    _fields_ = [("iterations", c_int64)]


class ErrorRecord(ctypes.Structure):
    _fields_ = [("code", c_int32), ("pad0", c_int32), ("value", c_int64), ("limit", c_int64)]


PARAM_TYPES = {"TLViewDesc": ViewDesc, "TLElementwiseParams": ElementwiseParams,
               "TLCopyParams": CopyParams, "TLReduceParams": ReduceParams,
               "TLMatmulParams": MatmulParams, "TLRowsParams": RowsParams, "TLExpertParams": ExpertParams,
               "TLNormParams": NormParams, "TLAttentionParams": AttentionParams,
               "TLDelayParams": DelayParams, "TLErrorRecord": ErrorRecord,
               "TLRopeParams": RopeParams, "TLFusedLinearParams": FusedLinearParams,
               "TLRopeKVParams": RopeKVParams, "TLOptimizerParams": OptimizerParams}


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    if CLANG is None:
        pytest.skip("clang++ not installed (apt-get install clang)")
    if shutil.which("cmake") is None:
        pytest.skip("cmake not installed; the shader unit is generated by objc/embed_shaders.cmake")
    work = tmp_path_factory.mktemp("metal_shim")
    shader_list = "|".join(str(p) for p in sorted(SHADERS.glob("*.metal")))
    headers = f"{ROOT / 'cpp' / 'runtime' / 'quant_blocks.h'}|{SHADERS / 'tl_params.h'}|{SHADERS / 'tl_common.h'}"
    result = run(["cmake", f"-DHEADERS={headers}", f"-DSHADERS={shader_list}",
                  f"-DOUTPUT={work / 'embedded.cpp'}", f"-DOUTPUT_METAL={work / 'unit.metal'}",
                  "-P", str(OBJC / "embed_shaders.cmake")])
    assert result.returncode == 0, result.stderr
    unit = (work / "unit.metal").read_text()
    # threadgroup arrays are shared by the threads of a group: function statics in the shim
    # (threadgroups run one at a time).
    unit, count = re.subn(r"(?m)^(\s*)threadgroup\s+(\w+)\s+(\w+)\[", r"\1static \2 \3[", unit)
    assert count >= 10
    (work / "unit_exec.metal").write_text(unit)
    library = work / "libtl_metal_shim.so"
    result = run([CLANG, "-std=c++20", "-O1", "-shared", "-fPIC", "-Wall", "-Werror",
                  "-Wno-unknown-attributes", "-Wno-unused-parameter",
                  f"-I{SHADERS / 'check' / 'shim'}", f'-DTL_SHIM_UNIT="{work / "unit_exec.metal"}"',
                  str(SHADERS / "check" / "shim_executor.cpp"), "-o", str(library), "-lpthread"])
    if result.returncode != 0 and "barrier" in result.stderr and "file not found" in result.stderr:
        pytest.skip("this C++ library has no <barrier> (C++20)")
    assert result.returncode == 0, result.stderr
    lib = ctypes.CDLL(str(library))
    lib.tl_shim_dispatch.restype = ctypes.c_int
    lib.tl_shim_dispatch.argtypes = [ctypes.c_char_p, c_void_p, ctypes.POINTER(c_void_p),
                                     ctypes.POINTER(c_uint32), ctypes.POINTER(c_uint32)]
    lib.tl_shim_sizeof.restype = ctypes.c_size_t
    lib.tl_shim_sizeof.argtypes = [ctypes.c_char_p]
    return lib


def dispatch(lib, kernel: str, params, buffers: dict, groups, threads) -> None:
    slots = (c_void_p * 8)()
    for index, array in buffers.items():
        slots[index] = array.ctypes.data if isinstance(array, np.ndarray) else ctypes.addressof(array)
    groups = (list(groups) + [1, 1])[:3]
    threads = (list(threads) + [1, 1])[:3]
    rc = lib.tl_shim_dispatch(kernel.encode(), ctypes.byref(params), slots,
                              (c_uint32 * 3)(*groups), (c_uint32 * 3)(*threads))
    assert rc == 0, f"unknown kernel {kernel}"


def desc(array: np.ndarray, dtype_code: int | None = None) -> ViewDesc:
    d = ViewDesc()
    d.ndim = array.ndim
    d.dtype = NP_CODE[array.dtype] if dtype_code is None else dtype_code
    for i in range(array.ndim):
        d.shape[i] = array.shape[i]
        d.strides[i] = array.strides[i] // array.itemsize
    return d


def test_param_struct_layouts_agree_between_python_and_the_shader_header(shim):
    for name, struct in PARAM_TYPES.items():
        assert shim.tl_shim_sizeof(name.encode()) == ctypes.sizeof(struct), name


BINARY_OPS = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "mod",
              "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"]
NP_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
             "pow": np.power, "maximum": np.maximum, "minimum": np.minimum, "mod": np.mod,
             "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
             "gt": np.greater, "ge": np.greater_equal, "logical_and": np.logical_and,
             "logical_or": np.logical_or}


@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_kernel_broadcasts_and_matches_numpy_in_f32(shim, op):
    rng = np.random.default_rng(1)
    a_full = rng.uniform(0.5, 3.0, size=(3, 5)).astype(np.float32)
    a_full[0, 0] = -2.0
    b_row = rng.uniform(0.5, 3.0, size=(5,)).astype(np.float16)
    b_row[1] = a_full[1, 1]
    b = np.broadcast_to(b_row, (3, 5))  # stride 0 on dim 0
    code = BINARY_OPS.index(op)
    comparison = code >= BINARY_OPS.index("eq")
    out = np.zeros((3, 5), np.bool_ if comparison else np.float32)
    p = ElementwiseParams(a=desc(a_full), b=desc(b), n=out.size, op=code,
                          out_dtype=NP_CODE[out.dtype], float_compute=1)
    dispatch(shim, "tl_binary", p, {1: a_full, 2: b, 3: out}, groups=[2], threads=[4])
    with np.errstate(all="ignore"):  # pow of a negative base: NaN on both sides
        expected = NP_BINARY[op](a_full.astype(np.float32), b.astype(np.float32))
    np.testing.assert_allclose(out, expected, rtol=1e-6, equal_nan=True)


def test_binary_kernel_integer_division_and_modulo_floor_like_python(shim):
    a = np.array([7, -7, 7, -7, 5, 0], np.int64)
    b = np.array([2, 2, -2, -2, 0, 3], np.int32)
    for op, ref in (("div", lambda x, y: np.where(y == 0, 0, np.floor_divide(x, np.where(y == 0, 1, y)))),
                    ("mod", lambda x, y: np.where(y == 0, 0, np.mod(x, np.where(y == 0, 1, y))))):
        out = np.zeros(6, np.int64)
        p = ElementwiseParams(a=desc(a), b=desc(b), n=6, op=BINARY_OPS.index(op),
                              out_dtype=I64, float_compute=0)
        dispatch(shim, "tl_binary", p, {1: a, 2: b, 3: out}, groups=[1], threads=[8])
        np.testing.assert_array_equal(out, ref(a, b))


def test_binary_scalar_kernel_scalar_first_and_integer_exactness(shim):
    a = np.array([[1, 2, 3], [4, 5, 6]], np.int64).T  # strided (transposed) input
    out = np.zeros(a.shape, np.int64)
    big = 2 ** 40 + 1
    p = ElementwiseParams(a=desc(a), n=a.size, op=BINARY_OPS.index("sub"), out_dtype=I64,
                          float_compute=0, scalar_i=big, scalar_f=float(big), scalar_first=1)
    dispatch(shim, "tl_binary_scalar", p, {1: a, 3: out}, groups=[1], threads=[4])
    np.testing.assert_array_equal(out, big - a)


UNARY_OPS = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid",
             "relu", "gelu_tanh", "gelu_erf", "silu", "square", "floor", "ceil", "round",
             "logical_not", "step"]


def unary_reference(op: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    return {
        "neg": -x, "abs": np.abs(x), "exp": np.exp(x), "log": np.log(np.abs(x)),
        "sqrt": np.sqrt(np.abs(x)), "rsqrt": 1 / np.sqrt(np.abs(x)), "sin": np.sin(x),
        "cos": np.cos(x), "tan": np.tan(x), "tanh": np.tanh(x), "sigmoid": 1 / (1 + np.exp(-x)),
        "relu": np.maximum(x, 0), "gelu_tanh": 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
        "gelu_erf": 0.5 * x * (1 + erf(x / np.sqrt(2))), "silu": x / (1 + np.exp(-x)),
        "square": x * x, "floor": np.floor(x), "ceil": np.ceil(x), "round": np.round(x),
        "logical_not": (x == 0).astype(np.float64), "step": (x > 0).astype(np.float64),
    }[op]


@pytest.mark.parametrize("op", UNARY_OPS)
def test_unary_kernel_matches_numpy(shim, op):
    x = np.array([-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 0.3, -1.2, 3.7], np.float32)
    if op in ("log", "sqrt", "rsqrt"):
        x = np.abs(x) + 0.25
    out = np.zeros_like(x)
    p = ElementwiseParams(a=desc(x), n=x.size, op=UNARY_OPS.index(op), out_dtype=F32,
                          float_compute=1)
    dispatch(shim, "tl_unary", p, {1: x, 3: out}, groups=[1], threads=[4])
    with np.errstate(all="ignore"):
        expected = unary_reference(op, x)
    np.testing.assert_allclose(out, expected, rtol=2e-6, atol=2e-6)


def test_copy_kernel_converts_dtypes_between_strided_views(shim):
    src = np.arange(12, dtype=np.float32).reshape(3, 4).T * 1.5  # transposed view
    dst_base = np.zeros((4, 6), np.float16)
    dst = dst_base[:, ::2]  # strided destination
    p = CopyParams(src=desc(src), dst=desc(dst), n=src.size)
    dispatch(shim, "tl_copy", p, {1: src, 2: dst}, groups=[2], threads=[3])
    np.testing.assert_array_equal(dst, src.astype(np.float16))
    assert not dst_base[:, 1::2].any()  # the gaps are untouched

    big = np.array([2 ** 40 + 3, -(2 ** 35) - 1], np.int64)
    out = np.zeros(2, np.int64)
    p = CopyParams(src=desc(big), dst=desc(out), n=2, integer_compute=1)
    dispatch(shim, "tl_copy", p, {1: big, 2: out}, groups=[1], threads=[2])
    np.testing.assert_array_equal(out, big)  # int64 survives (no f32 round trip)


def test_copy_kernel_rounds_f32_to_bf16_to_nearest_even(shim):
    src = np.array([1.0, 1.00390625, 1.01171875, -3.14159, 65504.0, np.nan], np.float32)
    out = np.zeros(src.size, np.uint16)
    p = CopyParams(src=desc(src), dst=desc(out, BF16), n=src.size)
    dispatch(shim, "tl_copy", p, {1: src, 2: out}, groups=[1], threads=[8])
    bits = src.view(np.uint32).astype(np.uint64)
    expected = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    expected[-1] = 0x7FC0
    np.testing.assert_array_equal(out, expected)


def test_fill_and_arange_kernels(shim):
    base = np.zeros((3, 4), np.int32)
    view = base[:, 1:3]
    p = CopyParams(dst=desc(view), n=view.size, value_i=-7, value_f=-7.0, integer_compute=1)
    dispatch(shim, "tl_fill", p, {2: view}, groups=[1], threads=[4])
    assert (view == -7).all() and (base[:, [0, 3]] == 0).all()

    out = np.zeros(10, np.float32)
    p = CopyParams(dst=desc(out), n=10, value_f=0.5, step_f=0.25)
    dispatch(shim, "tl_arange", p, {2: out}, groups=[1], threads=[3])
    np.testing.assert_allclose(out, 0.5 + 0.25 * np.arange(10))
    outi = np.zeros(5, np.int64)
    p = CopyParams(dst=desc(outi), n=5, value_f=0.5, step_f=1.0, integer_compute=1, exact_integers=0)
    dispatch(shim, "tl_arange", p, {2: outi}, groups=[1], threads=[2])
    np.testing.assert_array_equal(outi, [1, 2, 3, 4, 5])  # half away from zero, as llround


def test_where_kernel(shim):
    cond = np.array([[True, False, True]], np.bool_)
    cond_b = np.broadcast_to(cond, (2, 3))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), -1.0, np.float16)
    out = np.zeros((2, 3), np.float32)
    p = ElementwiseParams(a=desc(a), b=desc(b), c=desc(cond_b), n=6, out_dtype=F32, float_compute=1)
    dispatch(shim, "tl_where", p, {1: a, 2: b, 3: out, 4: cond_b}, groups=[1], threads=[4])
    np.testing.assert_array_equal(out, np.where(cond_b, a, b.astype(np.float32)))


REDUCE_OPS = ["sum", "mean", "max", "min", "argmax", "argmin"]


@pytest.mark.parametrize("kernel", ["tl_reduce", "tl_reduce_columns"])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_kernel_over_the_middle_axis(shim, op, kernel):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 300, 3)).astype(np.float32)
    x[1, 17, 2] = x[1, 40, 2] = 9.0  # a tie: the first index wins
    x[0, 5, 1] = np.nan  # NaN is the extreme, as in NumPy
    arg = op.startswith("arg")
    out = np.zeros((2, 3), np.int64 if arg else np.float32)
    p = ReduceParams(outer=2, n=300, inner=3, op=REDUCE_OPS.index(op), in_dtype=F32,
                     out_dtype=NP_CODE[out.dtype])
    threads = [256] if kernel == "tl_reduce" else [4]  # the columns form has no barriers
    dispatch(shim, kernel, p, {1: x, 2: out}, groups=[4], threads=threads)
    expected = getattr(np, op)(x.astype(np.float64), axis=1)
    if op in ("sum", "mean"):
        mask = ~np.isnan(expected)
        np.testing.assert_allclose(out[mask], expected[mask], rtol=1e-5, atol=1e-5)
        assert np.isnan(out[~mask]).all()
    else:
        np.testing.assert_array_equal(out, expected.astype(out.dtype))


@pytest.mark.parametrize("kernel", ["tl_reduce", "tl_reduce_columns"])
def test_reduce_kernel_integer_argmin_and_sum_are_exact(shim, kernel):
    x = np.array([[[5, 2**40], [-3, 2**40]], [[-3, 1], [7, 2**40 + 1]]], np.int64)  # [2, 2, 2]
    for op, expected in (("argmin", np.argmin(x, axis=1)), ("sum", x.sum(axis=1)), ("max", x.max(axis=1))):
        out = np.zeros((2, 2), np.int64)
        p = ReduceParams(outer=2, n=2, inner=2, op=REDUCE_OPS.index(op), in_dtype=I64, out_dtype=I64,
                         integer_compute=1)
        dispatch(shim, kernel, p, {1: x, 2: out}, groups=[1], threads=[256 if kernel == "tl_reduce" else 3])
        np.testing.assert_array_equal(out, expected, err_msg=op)


def test_reduce_kernel_integer_sum_is_exact(shim):
    x = np.full((1, 3, 1), 2 ** 40 + 1, np.int64)
    out = np.zeros((1, 1), np.int64)
    p = ReduceParams(outer=1, n=3, inner=1, op=0, in_dtype=I64, out_dtype=I64, integer_compute=1)
    dispatch(shim, "tl_reduce", p, {1: x, 2: out}, groups=[1], threads=[256])
    assert out[0, 0] == 3 * (2 ** 40 + 1)


@pytest.mark.parametrize("kernel", ["tl_softmax", "tl_softmax_columns"])
def test_softmax_kernel(shim, kernel):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 2, 2)) * 30).astype(np.float32)  # softmax over axis 1 (n = 2)
    out = np.zeros_like(x)
    p = ReduceParams(outer=3, n=2, inner=2, in_dtype=F32, out_dtype=F32)
    dispatch(shim, kernel, p, {1: x, 2: out}, groups=[2], threads=[256 if kernel == "tl_softmax" else 2])
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_matmul_kernel_batched_with_transposed_and_broadcast_operands(shim):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((1, 19, 21)).astype(np.float32)
    a_b = np.broadcast_to(a, (2, 19, 21))  # batch stride 0
    bt = rng.standard_normal((2, 17, 21)).astype(np.float16)
    b = bt.transpose(0, 2, 1)  # [2, 21, 17], strides {.., 1, 21}
    for out_dtype in (np.float32, np.float16):
        out = np.zeros((2, 19, 17), out_dtype)
        p = MatmulParams(a=desc(a_b), b=desc(b), batch=2, m=19, n=17, k=21,
                         out_dtype=NP_CODE[np.dtype(out_dtype)])
        dispatch(shim, "tl_matmul", p, {1: a_b, 2: b, 3: out}, groups=[2, 2, 2], threads=[16, 16])
        expected = np.matmul(a_b.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(out.astype(np.float64), expected,
                                   rtol=1e-3 if out_dtype == np.float16 else 1e-5, atol=1e-3)


def dequantize(qtype: str, data: np.ndarray) -> np.ndarray:
    import gguf
    from gguf import quants
    return quants.dequantize(data, gguf.GGMLQuantizationType[qtype.upper()]).astype(np.float64)


@pytest.mark.parametrize("qtype", sorted(QTYPES))
def test_linear_kernel_decodes_every_gguf_block_layout_like_the_gguf_package(shim, qtype):
    pytest.importorskip("gguf")
    rng = np.random.default_rng(5)
    m, n, k = 2, 5, 512
    w = random_quant_blocks(qtype, n, k, rng)
    x = rng.standard_normal((m, k)).astype(np.float32)
    out = np.zeros((m, n), np.float32)
    p = RowsParams(m=m, n=n, k=k, row_bytes=w.shape[1], w_dtype=QTYPES[qtype], out_dtype=F32)
    dispatch(shim, "tl_linear", p, {1: x, 2: w, 3: out}, groups=[3, 1], threads=[32])
    expected = x.astype(np.float64) @ dequantize(qtype, w).T
    np.testing.assert_allclose(out, expected, rtol=2e-4, atol=2e-4 * np.abs(expected).max())


def test_linear_kernel_with_plain_f16_weights(shim):
    rng = np.random.default_rng(6)
    w = rng.standard_normal((7, 40)).astype(np.float16)
    x = rng.standard_normal((1, 40)).astype(np.float32)
    out = np.zeros((1, 7), np.float32)
    p = RowsParams(m=1, n=7, k=40, row_bytes=80, w_dtype=F16, out_dtype=F32)
    dispatch(shim, "tl_linear", p, {1: x, 2: w, 3: out}, groups=[7, 1], threads=[32])
    np.testing.assert_allclose(out, x @ w.astype(np.float32).T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("qtype, x_rows", [("q4_0", 1), ("q8_0", 2), ("q4_k", 1), ("q6_k", 2)])
def test_expert_linear_kernel_routes_each_pair_through_its_expert(shim, qtype, x_rows):
    pytest.importorskip("gguf")
    rng = np.random.default_rng(11)
    experts, n, k, tokens, topk = 4, 5, 256, 3, 2
    w = random_quant_blocks(qtype, experts * n, k, rng)
    x = rng.standard_normal((tokens, x_rows, k)).astype(np.float32)
    ids = np.array([[2, 0], [3, 2], [1, 2]], np.int64)
    out = np.zeros((tokens, topk, n), np.float32)
    record = ErrorRecord()
    p = ExpertParams(pairs=tokens * topk, n=n, k=k, row_bytes=w.shape[1], experts=experts, topk=topk,
                     x_rows=x_rows, w_dtype=QTYPES[qtype], ids_dtype=I64)
    dispatch(shim, "tl_expert_linear", p, {1: x, 2: w, 3: ids, 4: out, 5: record}, groups=[2, 4], threads=[32])
    deq = dequantize(qtype, w).reshape(experts, n, k)
    expected = np.stack([np.stack([deq[ids[t, j]] @ x[t, 0 if x_rows == 1 else j].astype(np.float64)
                                   for j in range(topk)]) for t in range(tokens)])
    np.testing.assert_allclose(out, expected, rtol=2e-4, atol=2e-4 * np.abs(expected).max())
    assert record.code == 0
    ids[1, 1] = 9
    dispatch(shim, "tl_expert_linear", p, {1: x, 2: w, 3: ids, 4: out, 5: record}, groups=[2, 4], threads=[32])
    assert (record.code, record.value, record.limit) == (3, 9, experts)
    assert not out[1, 1].any()


@pytest.mark.parametrize("qtype", ["q4_0", "q5_1", "q4_k", "q6_k"])
def test_gather_rows_kernel_dequantizes_rows(shim, qtype):
    pytest.importorskip("gguf")
    rng = np.random.default_rng(7)
    table = random_quant_blocks(qtype, 6, 256, rng)
    ids = np.array([5, 0, 3, 3], np.int32)
    out = np.zeros((4, 256), np.float32)
    record = ErrorRecord()
    p = RowsParams(m=4, n=6, k=256, row_bytes=table.shape[1], w_dtype=QTYPES[qtype],
                   ids_dtype=I32, out_dtype=F32)
    dispatch(shim, "tl_gather_rows", p, {1: table, 2: ids, 3: out, 4: record},
             groups=[2, 3], threads=[64])
    np.testing.assert_allclose(out, dequantize(qtype, table)[ids], rtol=1e-6, atol=1e-7)
    assert record.code == 0


def test_gather_rows_kernel_records_an_out_of_range_id(shim):
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    ids = np.array([1, 7, 2], np.int64)
    out = np.full((3, 4), 99.0, np.float32)
    record = ErrorRecord()
    p = RowsParams(m=3, n=3, k=4, row_bytes=16, w_dtype=F32, ids_dtype=I64, out_dtype=F32)
    dispatch(shim, "tl_gather_rows", p, {1: table, 2: ids, 3: out, 4: record},
             groups=[1, 3], threads=[64])
    assert (record.code, record.value, record.limit) == (1, 7, 3)
    np.testing.assert_array_equal(out[[0, 2]], table[[1, 2]])
    assert (out[1] == 0).all()


def test_scatter_add_rows_kernel_matches_np_add_at_and_records_an_out_of_range_id(shim):
    rng = np.random.default_rng(8)
    ids = np.array([2, 0, 2, 2, 1, 2], np.int32)
    src = rng.standard_normal((6, 5)).astype(np.float32)
    out = np.zeros((4, 5), np.float32)
    record = ErrorRecord()
    p = RowsParams(m=6, n=4, k=5, w_dtype=F32, ids_dtype=I32, out_dtype=F32)
    dispatch(shim, "tl_scatter_add_rows", p, {1: ids, 2: src, 3: out, 4: record}, groups=[1], threads=[4])
    want = np.zeros((4, 5), np.float32)
    for i, r in enumerate(ids):  # id order, as the kernel and its CPU twin add
        want[r] += src[i]
    assert np.array_equal(out, want) and record.code == 0
    bad = np.array([1, 9], np.int64)
    out2 = np.zeros((4, 5), np.float32)
    p = RowsParams(m=2, n=4, k=5, w_dtype=F32, ids_dtype=I64, out_dtype=F32)
    dispatch(shim, "tl_scatter_add_rows", p, {1: bad, 2: src[:2].copy(), 3: out2, 4: record}, groups=[2],
             threads=[4])
    assert (record.code, record.value, record.limit) == (2, 9, 4)
    np.testing.assert_array_equal(out2[1], src[0])


@pytest.mark.parametrize("kind", ["adam", "adamw", "sgd", "nesterov"])
def test_optimizer_update_kernel_matches_the_float32_rule(shim, kind):
    rng = np.random.default_rng(9)
    n = 1000
    f = np.float32
    w, g = rng.standard_normal(n).astype(f), rng.standard_normal(n).astype(f)
    m, v = rng.standard_normal(n).astype(f), np.abs(rng.standard_normal(n)).astype(f)
    adam = kind.startswith("adam")
    p = OptimizerParams(n=n, step=0.01 / 0.1, decay=1 - 0.01 * 0.1, weight_decay=0.0 if kind == "adamw" else 0.05,
                        beta1=0.9, one_minus_beta1=1 - 0.9, beta2=0.999, one_minus_beta2=1 - 0.999,
                        bias2=0.001, eps=1e-8, momentum=0.9, kind=0 if adam else 1,
                        decoupled=int(kind == "adamw"), nesterov=int(kind == "nesterov"), has_m=1)
    wk, mk, vk = w.copy(), m.copy(), v.copy()
    dispatch(shim, "tl_optimizer_update", p, {1: wk, 2: g, 3: mk, 4: vk}, groups=[4], threads=[64])
    wd = f(p.weight_decay)
    if adam:
        ww = w * f(p.decay) if kind == "adamw" else w
        gg = g if kind == "adamw" else g + w * wd
        m2 = m * f(p.beta1) + gg * f(p.one_minus_beta1)
        v2 = v * f(p.beta2) + (gg * gg) * f(p.one_minus_beta2)
        want = ww - (m2 / (np.sqrt(v2 / f(p.bias2)) + f(p.eps))) * f(p.step)
        np.testing.assert_allclose(vk, v2, rtol=1e-6)
    else:
        gg = g + w * wd
        m2 = m * f(0.9) + gg
        gg = gg + m2 * f(0.9) if kind == "nesterov" else m2
        want = w - gg * f(p.step)
    np.testing.assert_allclose(mk, m2, rtol=1e-6)
    np.testing.assert_allclose(wk, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("with_weight", [True, False])
def test_rms_norm_kernel(shim, with_weight):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 300)).astype(np.float32)
    w = rng.standard_normal(300).astype(np.float16)
    out = np.zeros_like(x)
    p = NormParams(rows=3, d=300, eps=1e-5, x_dtype=F32, out_dtype=F32,
                   w_dtype=F16 if with_weight else -1, b_dtype=-1)
    dispatch(shim, "tl_rms_norm", p, {1: x, 2: w, 3: out}, groups=[2], threads=[256])
    x64 = x.astype(np.float64)
    expected = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + 1e-5)
    if with_weight:
        expected = expected * w.astype(np.float64)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_layer_norm_kernel_with_weight_and_bias(shim):
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((2, 64)) + 100).astype(np.float32)  # large mean
    w = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    out = np.zeros_like(x)
    p = NormParams(rows=2, d=64, eps=1e-5, x_dtype=F32, out_dtype=F32, w_dtype=F32, b_dtype=F32)
    dispatch(shim, "tl_layer_norm", p, {1: x, 2: w, 3: out, 4: b}, groups=[1], threads=[256])
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=1, keepdims=True)
    expected = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pos_offset", [5, 4000, 100_000])
@pytest.mark.parametrize("neox", [False, True])
def test_rope_kernel_matches_double_precision_angles(shim, neox, pos_offset):
    rng = np.random.default_rng(10)
    outer, s, h, d = 1, 3, 2, 64
    x = rng.standard_normal((outer, s, h, d)).astype(np.float32)
    out = np.zeros_like(x)
    p = RopeParams(outer=outer, seq=s, heads=h, d=d, pos_offset=pos_offset, neox=int(neox),
                   x_dtype=F32, out_dtype=F32)
    freq = 10000.0 ** (-2 * np.arange(d // 2) / d)  # the host's double computation
    hi = freq.astype(np.float32)
    lo = (freq - hi.astype(np.float64)).astype(np.float32)
    p.freq_hi[: d // 2] = hi.tolist()
    p.freq_lo[: d // 2] = lo.tolist()
    dispatch(shim, "tl_rope", p, {1: x, 3: out}, groups=[2], threads=[8])
    pos = pos_offset + np.arange(s, dtype=np.float64)[None, :, None, None]
    theta = pos * freq
    x64 = x.astype(np.float64)
    if neox:
        x0, x1 = x64[..., : d // 2], x64[..., d // 2:]
    else:
        x0, x1 = x64[..., 0::2], x64[..., 1::2]
    r0 = x0 * np.cos(theta) - x1 * np.sin(theta)
    r1 = x0 * np.sin(theta) + x1 * np.cos(theta)
    expected = np.empty_like(x64)
    if neox:
        expected[..., : d // 2], expected[..., d // 2:] = r0, r1
    else:
        expected[..., 0::2], expected[..., 1::2] = r0, r1
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def rope_frequencies(d: int, base: float):
    freq = base ** (-2 * np.arange(d // 2) / d)
    hi = freq.astype(np.float32)
    return hi, (freq - hi.astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize("normalize", [True, False])
def test_fused_linear_kernel_normalises_then_multiplies_and_adds_the_strided_addend(shim, normalize):
    pytest.importorskip("gguf")
    rng = np.random.default_rng(12)
    m, n, k = 3, 6, 256
    x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    nw = rng.standard_normal(k).astype(np.float16)
    w = random_quant_blocks("q4_1", n, k, rng)
    addend = np.ascontiguousarray(rng.standard_normal((n, m)).astype(np.float32)).T  # strides (1, m)
    scratch = np.zeros((m, k), np.float32)
    out = np.zeros((m, n), np.float32)
    p = FusedLinearParams(addend=desc(addend), m=m, n=n, k=k, row_bytes=w.shape[1], eps=1e-5,
                          w_dtype=QTYPES["q4_1"], nw_dtype=F16, prologue=int(normalize), has_addend=1)
    buffers = {1: x, 2: w, 3: out, 4: nw, 5: addend, 6: scratch}
    if normalize:
        p.phase = 0
        dispatch(shim, "tl_fused_linear", p, buffers, groups=[2], threads=[32])
    p.phase = 1
    dispatch(shim, "tl_fused_linear", p, buffers, groups=[4, 2], threads=[32])
    x64 = x.astype(np.float64)
    if normalize:
        x64 = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + 1e-5) * nw.astype(np.float64)
    expected = x64 @ dequantize("q4_1", w).T + addend
    np.testing.assert_allclose(out, expected, rtol=2e-4, atol=2e-4 * np.abs(expected).max())


def test_fused_linear_kernel_with_the_swiglu_prologue(shim):
    rng = np.random.default_rng(15)
    m, n, k = 2, 5, 48
    x = (rng.standard_normal((m, 2 * k)) * 3).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    scratch = np.zeros((m, k), np.float32)
    out = np.zeros((m, n), np.float32)
    p = FusedLinearParams(m=m, n=n, k=k, row_bytes=4 * k, eps=0.0, w_dtype=F32, nw_dtype=-1, prologue=2,
                          has_addend=0)
    buffers = {1: x, 2: w, 3: out, 4: w, 5: w, 6: scratch}
    p.phase = 0
    dispatch(shim, "tl_fused_linear", p, buffers, groups=[2], threads=[32])
    p.phase = 1
    dispatch(shim, "tl_fused_linear", p, buffers, groups=[5, 2], threads=[32])
    g, u = x[:, :k].astype(np.float64), x[:, k:].astype(np.float64)
    np.testing.assert_allclose(out, (g / (1 + np.exp(-g)) * u) @ w.T, rtol=1e-4, atol=1e-4)


def test_swiglu_kernel_reads_strided_halves(shim):
    rng = np.random.default_rng(13)
    gu = (rng.standard_normal((3, 40)) * 4).astype(np.float32)
    gate, up = gu[:, :20], gu[:, 20:]
    out = np.zeros((3, 20), np.float32)
    p = ElementwiseParams(a=desc(gate), b=desc(up), n=60, out_dtype=F32, float_compute=1)
    dispatch(shim, "tl_swiglu", p, {1: gu, 2: gu[:, 20:], 3: out}, groups=[2], threads=[16])
    g64 = gate.astype(np.float64)
    np.testing.assert_allclose(out, g64 / (1 + np.exp(-g64)) * up, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("neox", [False, True])
def test_rope_kv_write_kernel_rotates_q_and_k_into_the_cache_and_copies_v(shim, neox):
    rng = np.random.default_rng(14)
    s, hq, hkv, d, pos = 2, 4, 2, 32, 3000
    qkv = rng.standard_normal((s, (hq + 2 * hkv) * d)).astype(np.float32)
    q = qkv[:, :hq * d].reshape(s, hq, d)
    k = qkv[:, hq * d:(hq + hkv) * d].reshape(s, hkv, d)
    v = qkv[:, (hq + hkv) * d:].reshape(s, hkv, d)
    k_cache = np.zeros((6, hkv, d), np.float16)
    v_cache = np.zeros((6, hkv, d), np.float32)
    q_out = np.zeros((s, hq, d), np.float32)
    p = RopeKVParams(q=desc(q), k=desc(k), v=desc(v), k_dst=desc(k_cache[1:3]), v_dst=desc(v_cache[1:3]),
                     seq=s, hq=hq, hkv=hkv, d=d, pos_offset=pos, neox=int(neox))
    hi, lo = rope_frequencies(d, 10000.0)
    p.freq_hi[: d // 2] = hi.tolist()
    p.freq_lo[: d // 2] = lo.tolist()
    dispatch(shim, "tl_rope_kv_write", p, {1: qkv, 2: qkv[:, hq * d:], 3: qkv[:, (hq + hkv) * d:], 4: q_out,
                                           5: k_cache[1:], 6: v_cache[1:]}, groups=[3], threads=[32])
    theta = (pos + np.arange(s, dtype=np.float64))[:, None, None] * (10000.0 ** (-2 * np.arange(d // 2) / d))

    def rotate(x):
        x64 = x.astype(np.float64)
        i0 = np.arange(d // 2) if neox else 2 * np.arange(d // 2)
        i1 = i0 + d // 2 if neox else i0 + 1
        out = x64.copy()
        out[..., i0] = x64[..., i0] * np.cos(theta) - x64[..., i1] * np.sin(theta)
        out[..., i1] = x64[..., i0] * np.sin(theta) + x64[..., i1] * np.cos(theta)
        return out

    np.testing.assert_allclose(q_out, rotate(q), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(k_cache[1:3].astype(np.float64), rotate(k), rtol=2e-3, atol=2e-3)
    np.testing.assert_array_equal(v_cache[1:3], v)
    assert not k_cache[0].any() and not k_cache[3:].any() and not v_cache[3:].any()


def test_causal_mask_kernel(shim):
    out = np.full((3, 5), 7.0, np.float32)
    p = AttentionParams(sq=3, mask_cols=5, q_pos_offset=1)
    dispatch(shim, "tl_causal_mask", p, {1: out}, groups=[1], threads=[4])
    i, j = np.indices((3, 5))
    np.testing.assert_array_equal(out, np.where(j <= i + 1, 0.0, -np.inf))


def attention_reference(q, k, v, mask, scale, causal, offset, softcap=0.0):
    sq, hq, d = q.shape
    sk, hkv, _ = k.shape
    out = np.zeros((sq, hq, d))
    for h in range(hq):
        kh = h // (hq // hkv)
        scores = q[:, h, :].astype(np.float64) @ k[:, kh, :].astype(np.float64).T * scale
        if softcap > 0:
            scores = softcap * np.tanh(scores / softcap)
        if mask is not None:
            scores = scores + mask
        if causal:
            i, j = np.indices(scores.shape)
            scores = np.where(j <= i + offset, scores, -np.inf)
        for i in range(sq):
            row = scores[i]
            if np.isneginf(row).all():
                continue
            p = np.exp(row - row.max())
            out[i, h] = (p / p.sum()) @ v[:, kh, :].astype(np.float64)
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_attention_kernel_gqa_over_several_key_chunks_with_a_kv_cache_view(shim, causal):
    rng = np.random.default_rng(11)
    sq, hq, hkv, d, sk, cache = 3, 4, 2, 16, 150, 200  # 150 keys: two chunks of 128 threads
    q = rng.standard_normal((sq, hq, d)).astype(np.float32)
    k_cache = rng.standard_normal((cache, hkv, d)).astype(np.float16)
    v_cache = rng.standard_normal((cache, hkv, d)).astype(np.float32)
    k, v = k_cache[:sk], v_cache[:sk]  # first Sk rows of a preallocated cache
    mask = rng.uniform(-1, 0, size=(sq, sk)).astype(np.float32)
    mask[0, :] = -np.inf if not causal else mask[0, :]  # a fully masked row -> zeros
    out = np.full((sq, hq, d), 5.0, np.float32)
    offset = sk - sq
    p = AttentionParams(q=desc(q), k=desc(k), v=desc(v), mask=desc(mask), sq=sq, sk=sk, hq=hq,
                        hkv=hkv, d=d, scale=1 / math.sqrt(d), causal=int(causal), has_mask=1,
                        q_pos_offset=offset)
    dispatch(shim, "tl_attention", p, {1: q, 2: k, 3: v, 4: mask, 5: out},
             groups=[hq, sq], threads=[128])
    expected = attention_reference(q, k, v, mask, 1 / math.sqrt(d), causal, offset)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)


def test_attention_kernel_soft_caps_the_scores(shim):
    rng = np.random.default_rng(12)
    sq, hq, hkv, d, sk, cap = 2, 4, 2, 16, 150, 0.6
    q = (3 * rng.standard_normal((sq, hq, d))).astype(np.float32)
    k = rng.standard_normal((sk, hkv, d)).astype(np.float32)
    v = rng.standard_normal((sk, hkv, d)).astype(np.float32)
    out = np.zeros((sq, hq, d), np.float32)
    offset = sk - sq
    p = AttentionParams(q=desc(q), k=desc(k), v=desc(v), sq=sq, sk=sk, hq=hq, hkv=hkv, d=d,
                        scale=1 / math.sqrt(d), causal=1, has_mask=0, q_pos_offset=offset, softcap=cap)
    dispatch(shim, "tl_attention", p, {1: q, 2: k, 3: v, 5: out}, groups=[hq, sq], threads=[128])
    expected = attention_reference(q, k, v, None, 1 / math.sqrt(d), True, offset, softcap=cap)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)
    assert np.abs(expected - attention_reference(q, k, v, None, 1 / math.sqrt(d), True, offset)).max() > 1e-2


def test_delay_kernel_runs_and_leaves_the_sink_alone(shim):
    sink = np.zeros(16, np.float32)
    dispatch(shim, "tl_delay", DelayParams(iterations=1000), {1: sink}, groups=[1], threads=[1])
    assert not sink.any()


# ---- on a Mac: the device tests ------------------------------------------------------------------

@pytest.mark.skipif(sys.platform != "darwin", reason="the Metal device tests need macOS")
def test_metal_device_tests_pass_on_macos():
    # objc/tests/test_metal_on_mac.py skips itself when no Metal device or backend is available.
    result = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  str(OBJC / "tests" / "test_metal_on_mac.py")])
    assert result.returncode in (0, 5), result.stdout[-6000:] + result.stderr[-2000:]
