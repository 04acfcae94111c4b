"""An independent NumPy Llama forward pass: the test oracle for the GGUF loader, the tokenizer
and the TL forward pass in `tensorlogic/stdlib/llama.tl`.

It dequantizes every weight with `gguf.quants.dequantize` (through GGUFFile) and computes in the
given float dtype with a growing KV cache. It shares no code with the TL path beyond reading the
file: RoPE rotates adjacent pairs (2i, 2i+1), GQA maps query head h to KV head h // (Hq / Hkv).
"""
from __future__ import annotations

import numpy as np

from tensorlogic.models.gguf_file import GGUFFile
from tensorlogic.models.model_config import LlamaConfig


class NumpyLlama:
    def __init__(self, g: GGUFFile, dtype=np.float32):
        self.cfg = LlamaConfig.from_gguf(g)
        self.dtype = dtype
        c = self.cfg

        def w(name: str) -> np.ndarray:
            return np.ascontiguousarray(g.tensor_array(name), dtype=dtype)

        self.embd = w("token_embd.weight")
        self.out_norm = w("output_norm.weight")
        self.out = self.embd if c.tied_output else w("output.weight")
        self.layers = []
        for i in range(c.n_layers):
            p = f"blk.{i}."
            self.layers.append({k: w(p + k + ".weight") for k in (
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")})
        half = np.arange(0, c.head_dim, 2, dtype=np.float64) / c.head_dim
        self.inv_freq = 1.0 / (c.rope_base ** half)
        if c.rope_scaling == "freqs":
            self.inv_freq = self.inv_freq / g.tensor_array("rope_freqs.weight").astype(np.float64)
        elif c.rope_scaling == "linear":
            self.inv_freq = self.inv_freq / c.rope_scale
        self.reset()

    def reset(self) -> None:
        self.k_cache = [np.zeros((0, self.cfg.n_kv_heads, self.cfg.head_dim), self.dtype)
                        for _ in range(self.cfg.n_layers)]
        self.v_cache = [np.zeros_like(k) for k in self.k_cache]
        self.pos = 0

    def _rms_norm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.dtype(self.cfg.rms_eps)) * w

    def _rope(self, x: np.ndarray, start: int) -> np.ndarray:
        # x [S, H, D]; rotate pairs (2i, 2i+1) by angle pos * inv_freq[i]
        pos = np.arange(start, start + x.shape[0], dtype=np.float64)
        ang = pos[:, None] * self.inv_freq[None, :]
        cos = np.cos(ang).astype(self.dtype)[:, None, :]
        sin = np.sin(ang).astype(self.dtype)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def forward(self, ids: list[int]) -> np.ndarray:
        """Logits [len(ids), vocab] for `ids` placed after everything already in the cache."""
        c = self.cfg
        s = len(ids)
        x = self.embd[np.asarray(ids)]
        group = c.n_heads // c.n_kv_heads
        scale = self.dtype(1.0 / np.sqrt(c.head_dim))
        t = self.pos + s
        mask = np.triu(np.full((s, t), -np.inf, dtype=self.dtype), k=self.pos + 1)
        for li, L in enumerate(self.layers):
            h = self._rms_norm(x, L["attn_norm"])
            q = (h @ L["attn_q"].T).reshape(s, c.n_heads, c.head_dim)
            k = (h @ L["attn_k"].T).reshape(s, c.n_kv_heads, c.head_dim)
            v = (h @ L["attn_v"].T).reshape(s, c.n_kv_heads, c.head_dim)
            q, k = self._rope(q, self.pos), self._rope(k, self.pos)
            self.k_cache[li] = np.concatenate([self.k_cache[li], k])
            self.v_cache[li] = np.concatenate([self.v_cache[li], v])
            K = np.repeat(self.k_cache[li], group, axis=1)  # [T, Hq, D]
            V = np.repeat(self.v_cache[li], group, axis=1)
            scores = np.einsum("shd,thd->hst", q, K) * scale + mask[None]
            scores -= scores.max(axis=-1, keepdims=True)
            p = np.exp(scores)
            p /= p.sum(axis=-1, keepdims=True)
            attn = np.einsum("hst,thd->shd", p, V).reshape(s, c.d_model)
            x = x + attn @ L["attn_output"].T
            h = self._rms_norm(x, L["ffn_norm"])
            gate = h @ L["ffn_gate"].T
            up = h @ L["ffn_up"].T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ L["ffn_down"].T
        self.pos = t
        return self._rms_norm(x, self.out_norm) @ self.out.T

    def greedy(self, prompt_ids: list[int], n_new: int) -> tuple[list[int], np.ndarray]:
        """(n_new greedy ids, last prompt position's logits), EOS fed back like any token."""
        self.reset()
        logits = self.forward(prompt_ids)[-1]
        first = logits.copy()
        out = []
        for _ in range(n_new):
            nxt = int(np.argmax(logits))
            out.append(nxt)
            logits = self.forward([nxt])[-1]
        return out, first
