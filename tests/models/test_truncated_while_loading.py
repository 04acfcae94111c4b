"""A model file truncated while it loads (issue 14, should fix): touching a mapped page past the new
end of the file was a SIGBUS that killed the process. Tensor data is read with pread(), so it is a
one-line ModelError naming the file; a file that stays whole loads as before."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from tensorlogic.models.testing import write_tiny_llama

CHILD = """
import os, sys
from tensorlogic.models.gguf_file import GGUFFile
from tensorlogic.models.errors import ModelError
g = GGUFFile(sys.argv[1])
names = sorted(g.tensors, key=lambda n: g.tensors[n].offset)
first = g.tensor_bytes(names[0])
os.truncate(sys.argv[1], g.tensors[names[len(names) // 2]].offset + 10)
try:
    for n in names:
        g.tensor_bytes(n).sum()
except ModelError as e:
    print("error:", e)
"""


def test_truncated_while_loading_is_a_model_error_not_sigbus(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf", n_layers=2, d_model=256, d_ff=512)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert r.stdout.startswith(f"error: {path}: the file was truncated while loading"), r.stdout


def test_whole_file_reads_the_same_bytes_as_the_mapping(tmp_path):
    from tensorlogic.models.gguf_file import GGUFFile

    path = write_tiny_llama(tmp_path / "t.gguf")
    raw = np.fromfile(path, dtype=np.uint8)
    with GGUFFile(path) as g:
        for name, info in g.tensors.items():
            got = g.tensor_bytes(name)
            np.testing.assert_array_equal(got.reshape(-1), raw[info.offset:info.offset + info.nbytes])
