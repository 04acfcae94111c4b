"""An independent NumPy Gemma 3 forward pass in float64: the test oracle for `stdlib/gemma3.tl`.

It reads the hyperparameters straight from the GGUF metadata (not through the package's
Gemma3Config) with the architecture's published defaults (every 6th layer global, local RoPE base
10000), dequantizes weights with `gguf.quants.dequantize` (through GGUFFile), and computes the whole
graph in float64 over a growing KV cache: embedding * sqrt(d_model); per layer RMSNorm, Q/K/V,
per-head RMSNorm of q and k, RoPE on the two halves of each head (NeoX), attention with a causal
mask, on local layers also hiding keys `window` or more positions back, RMSNorm of the attention
output, residual, RMSNorm, GELU(tanh)(gate) * up, down, RMSNorm, residual; final RMSNorm, logits
(tied to the embedding unless output.weight exists), soft-capping when the file sets a cap.
Large matrices (the 262144-row embedding) are dequantized in row chunks, never whole.
"""
from __future__ import annotations

import numpy as np
from gguf.quants import dequantize

from tensorlogic.models.gguf_file import GGUFFile

_CHUNK_ROWS = 16384


class NumpyGemma3:
    def __init__(self, g: GGUFFile, keep_weights: bool = True):
        self.g = g
        md = g.metadata
        a = "gemma3"
        assert md["general.architecture"] == a
        self.n_layers = int(md[f"{a}.block_count"])
        self.d_model = int(md[f"{a}.embedding_length"])
        self.n_heads = int(md[f"{a}.attention.head_count"])
        self.n_kv = int(md[f"{a}.attention.head_count_kv"])
        self.head_dim = int(md[f"{a}.attention.key_length"])
        self.eps = float(md[f"{a}.attention.layer_norm_rms_epsilon"])
        self.window = int(md[f"{a}.attention.sliding_window"])
        self.pattern = int(md.get(f"{a}.attention.sliding_window_pattern", 6))
        self.global_base = float(md[f"{a}.rope.freq_base"])
        self.local_base = float(md.get(f"{a}.rope.freq_base_swa", 10000.0))
        self.softcap = float(md.get(f"{a}.final_logit_softcapping", 0.0))
        self.out_name = "output.weight" if "output.weight" in g.tensors else "token_embd.weight"
        self.keep_weights = keep_weights
        self._weights: dict[str, np.ndarray] = {}
        self.reset()

    def reset(self) -> None:
        self.k_cache = [np.zeros((0, self.n_kv, self.head_dim)) for _ in range(self.n_layers)]
        self.v_cache = [np.zeros((0, self.n_kv, self.head_dim)) for _ in range(self.n_layers)]
        self.pos = 0

    def _w(self, name: str) -> np.ndarray:
        if name in self._weights:
            return self._weights[name]
        info = self.g.tensors[name]
        w = dequantize(np.asarray(self.g.tensor_bytes(name)), info.ggml_type).astype(np.float64)
        w = w.reshape(info.shape)
        if self.keep_weights:
            self._weights[name] = w
        return w

    def _rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        info = self.g.tensors[name]
        raw = np.asarray(self.g.tensor_bytes(name))[ids]
        return dequantize(raw, info.ggml_type).astype(np.float64).reshape(len(ids), -1)

    def _project_out(self, x: np.ndarray) -> np.ndarray:
        """x [s, d] @ W_outᵀ with W_out dequantized a chunk of rows at a time."""
        info = self.g.tensors[self.out_name]
        raw = self.g.tensor_bytes(self.out_name)
        parts = []
        for r0 in range(0, raw.shape[0], _CHUNK_ROWS):
            w = dequantize(np.asarray(raw[r0:r0 + _CHUNK_ROWS]), info.ggml_type).astype(np.float64)
            parts.append(x @ w.reshape(-1, self.d_model).T)
        return np.concatenate(parts, axis=1)

    def _rms(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope_halves(self, x: np.ndarray, start: int, base: float) -> np.ndarray:
        half = self.head_dim // 2
        inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / self.head_dim)
        ang = np.arange(start, start + x.shape[0], dtype=np.float64)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)

    @staticmethod
    def _gelu_tanh(x: np.ndarray) -> np.ndarray:
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x * x * x)))

    def forward(self, ids: list[int], last_only: bool = False) -> np.ndarray:
        """Logits [len(ids), vocab] (or [1, vocab] of the last one) for ids placed after the cache."""
        s, t = len(ids), self.pos + len(ids)
        x = self._rows("token_embd.weight", np.asarray(ids)) * np.sqrt(self.d_model)
        qpos = np.arange(self.pos, t)[:, None]
        kpos = np.arange(t)[None, :]
        causal = kpos <= qpos
        in_window = causal & (qpos - kpos < self.window)
        group = self.n_heads // self.n_kv
        scale = 1.0 / np.sqrt(self.head_dim)
        for i in range(self.n_layers):
            p = f"blk.{i}."
            is_global = (i + 1) % self.pattern == 0
            base = self.global_base if is_global else self.local_base
            visible = causal if is_global else in_window
            h = self._rms(x, self._w(p + "attn_norm.weight"))
            q = (h @ self._w(p + "attn_q.weight").T).reshape(s, self.n_heads, self.head_dim)
            k = (h @ self._w(p + "attn_k.weight").T).reshape(s, self.n_kv, self.head_dim)
            v = (h @ self._w(p + "attn_v.weight").T).reshape(s, self.n_kv, self.head_dim)
            q = self._rope_halves(self._rms(q, self._w(p + "attn_q_norm.weight")), self.pos, base)
            k = self._rope_halves(self._rms(k, self._w(p + "attn_k_norm.weight")), self.pos, base)
            self.k_cache[i] = np.concatenate([self.k_cache[i], k])
            self.v_cache[i] = np.concatenate([self.v_cache[i], v])
            K = np.repeat(self.k_cache[i], group, axis=1).transpose(1, 2, 0)  # [H, D, T]
            V = np.repeat(self.v_cache[i], group, axis=1).transpose(1, 0, 2)  # [H, T, D]
            scores = np.matmul(q.transpose(1, 0, 2), K) * scale  # [H, S, T]
            scores = np.where(visible[None], scores, -np.inf)
            scores -= scores.max(axis=-1, keepdims=True)
            prob = np.exp(scores)
            prob /= prob.sum(axis=-1, keepdims=True)
            attn = np.matmul(prob, V).transpose(1, 0, 2).reshape(s, self.n_heads * self.head_dim)
            x = x + self._rms(attn @ self._w(p + "attn_output.weight").T, self._w(p + "post_attention_norm.weight"))
            h = self._rms(x, self._w(p + "ffn_norm.weight"))
            ff = self._gelu_tanh(h @ self._w(p + "ffn_gate.weight").T) * (h @ self._w(p + "ffn_up.weight").T)
            x = x + self._rms(ff @ self._w(p + "ffn_down.weight").T, self._w(p + "post_ffw_norm.weight"))
        self.pos = t
        if last_only:
            x = x[-1:]
        logits = self._project_out(self._rms(x, self._w("output_norm.weight")))
        if self.softcap > 0:
            logits = np.tanh(logits / self.softcap) * self.softcap
        return logits

    def greedy(self, prompt_ids: list[int], n_new: int) -> tuple[list[int], np.ndarray]:
        """(n_new greedy ids, last prompt position's logits), every id fed back."""
        self.reset()
        logits = self.forward(prompt_ids, last_only=True)[-1]
        first = logits.copy()
        out = []
        for _ in range(n_new):
            nxt = int(np.argmax(logits))
            out.append(nxt)
            logits = self.forward([nxt])[-1]
        return out, first
