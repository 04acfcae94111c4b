"""Ctrl-C during `tl generate` after the model loaded (issue 14.6): exit 130, one line, as a
Ctrl-C before the load does (it used to exit 0 with the partial output)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import tensorlogic


def test_ctrl_c_during_generation_exits_130(smollm2_path):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(tensorlogic.__file__))))
    p = subprocess.Popen([sys.executable, "-m", "tensorlogic", "generate", "--model", str(smollm2_path),
                          "--prompt", "Tell me a long story.", "--max-tokens", "2000", "--ignore-eos"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        first = p.stdout.read(1)  # the model loaded and produced text
        assert first, p.stderr.read()
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert b"Traceback" not in err and err.decode().strip().splitlines()[-1] == "tl: interrupted"


