"""Training checkpoints: `save_checkpoint(path)` / `load_checkpoint(path)` (PyTorch's torch.save of
model.state_dict(), optimizer.state_dict(), scheduler.state_dict() and the RNG state, in one file).

Invariant: a checkpoint holds everything a learn block's next step reads, so a run resumed from one
is bitwise equal on the CPU to the uninterrupted run (tests/learning/test_training_mechanics.py):
every live learnable's values, in creation order (a resumed program creates its learnables in the
same order; shapes and dtypes are checked), the optimizer's state tensors and scalars (rates of every
group, step count, momentum / beta1 that one_cycle_lr moves), the schedule's state, the session's
epoch and step counters, and the run's random generator (dropout masks, shuffles). The file is a
NumPy .npz written atomically with no pickled objects: arrays plus one JSON string of scalars.
"""
from __future__ import annotations

import io
import json
import os

import numpy as np

from . import symbolic
from .autograd import session as learn_session
from .autograd import tape
from .convert import BuiltinArgError, core, to_str
from .registry import builtin

C = "learning"
FORMAT = "tensorlogic-checkpoint-1"


def _path(v) -> str:
    p = os.path.expanduser(to_str(v, "path"))
    if not p.endswith(".npz"):
        raise BuiltinArgError(f"{p}: a checkpoint file name must end in .npz")
    return p


def _opt_scalars(opt) -> dict:
    out = {"kind": opt.kind, "lr": opt.lr, "base_lr": opt.base_lr, "steps": opt.steps,
           "groups": [[g.lr, g.base_lr] for g in opt.groups]}
    for name in ("momentum", "beta1"):
        if hasattr(opt, name):
            out[name] = getattr(opt, name)
    return out


@builtin("save_checkpoint", "save_checkpoint(path)",
         "write every learnable, and inside a learn block the optimizer, schedule, epoch and random state, "
         "to a .npz file (call it at the end of an epoch; load_checkpoint resumes at the next)",
         min_args=1, max_args=1, needs_ctx=True, category=C)
def save_checkpoint(ctx, path):
    symbolic.abandon("it calls save_checkpoint, which writes a file")
    p = _path(path)
    params = tape.live_params()
    index = {param: i for i, param in enumerate(params)}
    arrays: dict[str, np.ndarray] = {}
    meta: dict = {"format": FORMAT, "params": [], "rng": ctx.rng.bit_generator.state}
    for i, param in enumerate(params):
        t = param.tensor
        arrays[f"param{i}"] = np.ascontiguousarray(t.numpy())
        meta["params"].append({"shape": list(t.shape), "dtype": t.dtype})
    session = learn_session.current()
    if session is not None:
        opt = session.optimizer
        meta["optimizer"] = _opt_scalars(opt)
        meta["session"] = {"epoch": session.epoch + 1, "steps": session.steps, "micro": session.micro}
        meta["scheduler"] = session.scheduler.state() if session.scheduler is not None else None
        for name, states in opt.state_tensors().items():
            for param, t in states.items():
                if param in index:
                    arrays[f"state.{name}.{index[param]}"] = np.ascontiguousarray(t.numpy())
    arrays["meta"] = np.array(json.dumps(meta))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    tmp = f"{p}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(buf.getvalue())
        os.replace(tmp, p)
    except OSError as e:
        raise BuiltinArgError(f"cannot write {p}: {e.strerror or e}") from None
    return None


@builtin("load_checkpoint", "load_checkpoint(path)",
         "restore what save_checkpoint wrote (learnables in creation order; inside a learn block also the "
         "optimizer, schedule and random state); returns the epoch to resume at (0 outside a learn block)",
         min_args=1, max_args=1, needs_ctx=True, category=C)
def load_checkpoint(ctx, path):
    symbolic.abandon("it calls load_checkpoint, which reads a file")
    p = _path(path)
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise BuiltinArgError(f"cannot read checkpoint {p}: {e}") from None
    try:
        meta = json.loads(str(arrays.pop("meta")))
    except (KeyError, ValueError):
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise BuiltinArgError(f"{p} is not a TensorLogic checkpoint (written by save_checkpoint)")
    params = tape.live_params()
    saved = meta["params"]
    if len(saved) != len(params):
        raise BuiltinArgError(f"{p} holds {len(saved)} learnables, the program has {len(params)} (a checkpoint "
                              f"restores the learnables of the same program, made in the same order)")
    for i, (param, info) in enumerate(zip(params, saved)):
        t = param.tensor
        if list(t.shape) != info["shape"] or t.dtype != info["dtype"]:
            raise BuiltinArgError(f"{p}: learnable {i} is {info['dtype']}{info['shape']} there, "
                                  f"{t.dtype}{list(t.shape)} here")
    session = learn_session.current()
    if session is not None and "optimizer" not in meta:
        raise BuiltinArgError(f"{p} was saved outside a learn block: it has no optimizer state to resume")
    if session is not None and meta["optimizer"]["kind"] != session.optimizer.kind:
        raise BuiltinArgError(f"{p} holds {meta['optimizer']['kind']} state, this learn block uses "
                              f"{session.optimizer.kind}")
    with tape.no_recording():
        for i, param in enumerate(params):
            core.copy_(param.tensor, core.from_numpy(arrays[f"param{i}"], param.tensor.dtype))
    tape.zero_grad(params)
    ctx.rng.bit_generator.state = meta["rng"]
    if session is None:
        return 0
    opt, o = session.optimizer, meta["optimizer"]
    opt.lr, opt.base_lr, opt.steps = o["lr"], o["base_lr"], o["steps"]
    if len(o["groups"]) != len(opt.groups):
        raise BuiltinArgError(f"{p} has {len(o['groups'])} parameter groups, this optimizer {len(opt.groups)}")
    for g, (lr, base) in zip(opt.groups, o["groups"]):
        g.lr, g.base_lr = lr, base
    for name in ("momentum", "beta1"):
        if name in o:
            setattr(opt, name, o[name])
    opt.attach(params)
    for name, states in opt.state_tensors().items():
        states.clear()
        for i, param in enumerate(params):
            key = f"state.{name}.{i}"
            if key in arrays:
                states[param] = core.from_numpy(np.ascontiguousarray(arrays[key], dtype=np.float32))
    s = meta["session"]
    session.steps, session.micro = s["steps"], s["micro"]
    session.epoch_base = s["epoch"]
    if session.scheduler is not None and meta.get("scheduler") is not None:
        session.scheduler.load_state(meta["scheduler"])
    return s["epoch"]
