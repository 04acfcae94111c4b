"""How close a model's logits must come to the float64 NumPy oracles (and a prefill in pieces to
one prefill) on the backend the tests run on. A module of its own so tests can import it.

Every backend sums in f32, in another order than the oracle: 1e-4 of the largest logit. The CUDA
backend's linear products with a quantized or f16 weight and more than 8 rows (a prompt's
prefill) run on the f16 tensor cores, x and the weight rounded to f16 with f32 sums
(cpp/backends/cuda/matmul.cu; TL_CUDA_LINEAR_F16=0 keeps f32 operands): there, 2e-3."""
from __future__ import annotations

import os

from tensorlogic import _core


def half_products() -> bool:
    """Whether the running backend rounds prefill products' operands to f16."""
    return _core.backend_name() == "cuda" and os.environ.get("TL_CUDA_LINEAR_F16", "1") != "0"


def logits_rel() -> float:
    """The largest allowed |TL - oracle| as a fraction of max(|oracle logit|, 1)."""
    return 2e-3 if half_products() else 1e-4


def pieces_tol() -> dict:
    """assert_allclose's tolerances for a prompt prefilled in pieces against one prefill (pieces of
    up to 8 rows take the f32 matrix-vector kernels, longer ones the f16 products on CUDA)."""
    return dict(atol=2e-3, rtol=2e-3) if half_products() else dict(atol=1e-5, rtol=1e-5)
