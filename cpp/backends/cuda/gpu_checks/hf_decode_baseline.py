"""Baseline for the CUDA numbers: Hugging Face transformers (PyTorch eager attention, fp16) on a
SmolLM2-135M-shaped Llama with random weights, on the same GPU. Prints prompt and decode
tokens/s as JSON (median of 3 runs after a warm-up). Weights are random: speed only."""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main() -> int:
    prompt_len = int(sys.argv[1]) if len(sys.argv) > 1 else 37
    new_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                      rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                      attn_implementation="eager")
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to("cuda", torch.float16).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, prompt_len), device="cuda")
    gen = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=8, min_new_tokens=8, **gen)  # warm-up
        prompt_s, total_s = [], []
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(prompt)
            torch.cuda.synchronize()
            prompt_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **gen)
            torch.cuda.synchronize()
            total_s.append(time.perf_counter() - t0)
    assert out.shape[1] == prompt_len + new_tokens
    p, t = statistics.median(prompt_s), statistics.median(total_s)
    print(json.dumps({"hf_fp16_eager": {
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "prompt_tokens": prompt_len, "new_tokens": new_tokens,
        "prompt_tok_s": round(prompt_len / p, 1),
        "decode_tok_s": round((new_tokens - 1) / max(t - p, 1e-9), 1)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
