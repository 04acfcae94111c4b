"""Which ops carry a gradient: the one table of every `_core` op and every TL builtin.

Invariant: every callable of `_core` is a key of CORE_OPS and every registered builtin a key of
BUILTIN_OPS (tests/learning/test_op_table.py enumerates both, so a new op cannot be added without
saying what it does with a gradient). Each entry is one of three kinds:
- differentiable: a gradient flows to its float tensor inputs (a backward rule in rules.py, a
  composition of differentiable ops, or a rule whose gradient is zero, as floor's); the test
  checks each against float64 finite differences;
- refuses: it would cut the graph, so a learnable input (or one computed from a learnable) is an
  error naming the op (`refusal_message`), never a silently missing gradient;
- no gradient: by nature nothing to differentiate (an integer, bool, string or shape result, a host
  read such as `item`, a fresh tensor made from no tensor input, device control, the optimizer's
  in-place update, the gradient bookkeeping itself); the test checks that such a builtin never turns
  a learnable input into a float tensor that silently lost its gradient.
docs/learning.md's list of differentiable builtins is generated from BUILTIN_OPS (`doc_list`); a
test checks the doc matches. This module imports nothing, so the registry and the doc tool can read it.
"""
from __future__ import annotations

DIFFERENTIABLE = "differentiable"
REFUSES = "refuses"
NO_GRADIENT = "no gradient"

# ---------------------------------------------------------------- `_core` ops
# how: rule (taped with its rules.py rule), zero (taped, gradient zero: piecewise constant),
# composite (run as differentiable ops when an input is tracked), pieces (each piece taped as a
# slice), refuses, or a no-gradient reason.
_CORE_RULE = ("add sub mul div pow maximum minimum mod where neg abs exp log sqrt rsqrt square sin cos tan "
              "tanh sigmoid relu silu gelu astype contiguous sum mean max min softmax log_softmax matmul "
              "linear reshape flatten squeeze unsqueeze expand transpose permute slice select concat stack "
              "embedding index_select scatter_add_rows")
_CORE_ZERO = "floor ceil round step"
_CORE_COMPOSITE = "rms_norm layer_norm rope attention swiglu swiglu_linear rms_norm_linear"
_CORE_PIECES = "split chunk"
_CORE_REFUSES = {
    "rope_kv_write": "writes k and v into a KV cache, for generation only",
    "attention_rows": "attends over a KV slot store, for generation only",
    "copy_": "writes src into another tensor in place; compute a new tensor instead",
    "expert_linear": "mixture-of-experts inference: it has no backward rule",
}
_CORE_NO_GRADIENT = {
    "integer or bool result": "argmax argmin eq ne lt le gt ge logical_and logical_not logical_or",
    "a new tensor from no tensor input": "arange empty full ones zeros rand randn from_numpy from_quantized "
                                         "causal_mask",
    "writes a number in place": "fill_",
    "the optimizer's in-place update (runs with recording off)": "adam_update_ sgd_update_",
    "device control": "abandon_recording available_backends backend_name buffer_reserve buffer_stats "
                      "clear_cache dtypes get_debug init kernel_ops memory_stats op_table q8_activations "
                      "recording_active reset_peak_memory set_cache_limit set_debug set_ops_per_command_buffer "
                      "set_q8_activations shutdown synchronize threads",
    "the logic engine's set operations on NumPy arrays (no tensors)": "bitset_or_pairs bitset_set_keys "
                                                                      "chain_pairs merge_new_keys",
}

CORE_OPS: dict[str, tuple[str, str]] = {}
for _n in _CORE_RULE.split():
    CORE_OPS[_n] = (DIFFERENTIABLE, "rule")
for _n in _CORE_ZERO.split():
    CORE_OPS[_n] = (DIFFERENTIABLE, "zero")
for _n in _CORE_COMPOSITE.split():
    CORE_OPS[_n] = (DIFFERENTIABLE, "composite")
for _n in _CORE_PIECES.split():
    CORE_OPS[_n] = (DIFFERENTIABLE, "pieces")
for _n, _why in _CORE_REFUSES.items():
    CORE_OPS[_n] = (REFUSES, _why)
for _why, _names in _CORE_NO_GRADIENT.items():
    for _n in _names.split():
        CORE_OPS[_n] = (NO_GRADIENT, _why)


def core_ops(how: str) -> tuple[str, ...]:
    """The `_core` ops taped a given way (rule, zero, composite, pieces), in table order."""
    return tuple(n for n, (kind, h) in CORE_OPS.items() if kind == DIFFERENTIABLE and h == how)


# ---------------------------------------------------------------- builtins
# Differentiable builtins by topic (the doc lists them so); `zero` ones have a zero gradient
# (piecewise constant, as in PyTorch).
_BUILTIN_DIFFERENTIABLE = {
    "arithmetic": "add sub mul div pow maximum minimum neg abs square sqrt rsqrt exp log sin cos tan tanh "
                  "sigmoid relu silu gelu sigmoid_t where clamp",
    "piecewise constant (zero gradient)": "floor ceil round sign step floor_div",
    "reductions": "sum mean max min prod cumsum var std norm dot softmax log_softmax",
    "linear algebra": "matmul linear einsum",
    "shape and indexing": "astype reshape transpose permute flatten squeeze unsqueeze broadcast_to concat stack "
                          "slice slice_last select gather index_select scatter chunk split contiguous flip pad "
                          "repeat tile tril triu sort topk",
    "neural networks": "rms_norm rms_norm_linear layer_norm swiglu swiglu_linear embedding scatter_add_rows rope "
                       "attention causal_attention apply_attention_mask dropout conv2d max_pool2d avg_pool2d "
                       "batch_norm",
    "losses and activations (PyTorch's definitions)": "softplus leaky_relu logsumexp mse_loss l1_loss "
                                                      "binary_cross_entropy_with_logits nll_loss cross_entropy",
}
_BUILTIN_REFUSES = {
    "rope_kv_write": "writes k and v into a KV cache, for generation only",
    "expert_linear": "mixture-of-experts inference: it has no backward rule",
    "cache_attention": "attends over a KV cache, for generation only",
    "copy_": "writes src into dst in place; compute a new tensor instead",
    "one_hot": "its ids are indices",
}
_BUILTIN_NO_GRADIENT = {
    "integer, bool, string or shape result": "argmax argmin argsort isnan isinf any all shape numel ndim "
                                             "dtype len is_learnable contains str format join upper lower trim "
                                             "starts_with ends_with replace substring split_string tokenize plot "
                                             "detokenize detokenize_single apply_chat_template "
                                             "temperature_sample top_k top_p multinomial chooses_on_device",
    "reads values to the host (as PyTorch's .item())": "item to_float to_int to_list print println assert "
                                                       "assert_eq assert_about_eq panic write_text save "
                                                       "load_relation save_relation",
    "a new value from no tensor input": "zeros ones full arange rand randn from_array eye linspace "
                                        "positional_encoding causal_mask range range_i map random seed "
                                        "load read_text load_model load_model_f32 load_model_f16 get_tensor "
                                        "load_tokenizer text_stream token_sampler kv_cache llama_kv_cache "
                                        "json_sampler relation_sampler "
                                        "KVCache::new_f32 KVCache::new_f16 KVCache::with_capacity "
                                        "relation_tensor infer entities env clock args input randperm minibatches",
    "containers (hold values as they are)": "append push pop reverse keys values has_key remove",
    "gradients and training (the tape's own bookkeeping)": "learnable backward grad zero_grad detach sgd adam "
                                                           "adamw set_lr get_lr clip_grad_norm clip_grad_value step_lr "
                                                           "exponential_lr cosine_lr rmsprop adagrad param_group "
                                                           "multistep_lr linear_lr one_cycle_lr reduce_lr_on_plateau "
                                                           "save_checkpoint load_checkpoint",
    "memory and device": "buffer_reserve buffer_reserve_learnable buffer_stats memory_stats clear_cache "
                         "reset_peak_memory synchronize",
}
_TYPED_CREATION = ("zeros", "ones", "full", "arange", "from_array", "rand")
_TYPED_PREFIXES = ("f32", "f16", "bf16", "i32", "i64")

BUILTIN_OPS: dict[str, tuple[str, str]] = {}
for _topic, _names in _BUILTIN_DIFFERENTIABLE.items():
    for _n in _names.split():
        BUILTIN_OPS[_n] = (DIFFERENTIABLE, _topic)
for _n, _why in _BUILTIN_REFUSES.items():
    BUILTIN_OPS[_n] = (REFUSES, _why)
for _why, _names in _BUILTIN_NO_GRADIENT.items():
    for _n in _names.split():
        BUILTIN_OPS[_n] = (NO_GRADIENT, _why)
for _p in _TYPED_PREFIXES:
    for _n in _TYPED_CREATION:
        BUILTIN_OPS[f"{_p}::{_n}"] = (NO_GRADIENT, "a new value from no tensor input")


def refusal_message(name: str) -> str:
    """The error of op `name` (a REFUSES entry of either table) given a learnable input."""
    why = (BUILTIN_OPS.get(name) or CORE_OPS[name])[1]
    return (f"{name} has no gradient ({why}), and an input is learnable or computed from one: "
            f"detach(x) it first to use its values")


def doc_list() -> str:
    """The markdown list of differentiable builtins docs/learning.md carries (between its markers)."""
    lines = []
    for topic, names in _BUILTIN_DIFFERENTIABLE.items():
        lines.append(f"- {topic}: " + ", ".join(f"`{n}`" for n in names.split()))
    lines.append("- no gradient, by nature (results that are integers, bools, strings or shapes; host "
                 "reads such as `item`; new values made from no tensor)")
    refused = ", ".join(f"`{n}` ({why})" for n, why in _BUILTIN_REFUSES.items())
    lines.append(f"- refused with an error when an input is learnable: {refused}")
    return "\n".join(lines)
