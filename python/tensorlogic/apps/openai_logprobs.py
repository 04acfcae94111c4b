"""OpenAI's `logprobs` response shapes, from a GuidedSampler's step records (builtins/guided.py).

    chat:        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}],
                  "refusal": null}
    completions: {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob}], "text_offset": [...]}

Invariant: the records given cover exactly the tokens whose text the reply shows (`within_text`
drops special tokens, such as the end-of-generation id, and tokens after a stop string), in order.
A token's "token" is its text (bytes that are part of a character show as U+FFFD; "bytes" has them).
"""
from __future__ import annotations


def _text(tok, tid: int) -> str:
    return tok.token_bytes(tid).decode("utf-8", "replace")


def within_text(tok, records: list, text: str) -> list:
    """The records of the tokens that make up `text` (the reply, maybe cut at a stop string)."""
    out, length = [], 0
    budget = len(text.encode("utf-8"))
    for r in records:
        if tok.is_special(r.id):
            continue
        if length >= budget:
            break
        out.append(r)
        length += len(tok.token_bytes(r.id))
    return out


def chat(tok, records: list) -> dict:
    def entry(tid: int, lp: float) -> dict:
        return {"token": _text(tok, tid), "logprob": lp, "bytes": list(tok.token_bytes(tid))}

    return {"content": [{**entry(r.id, r.logprob), "top_logprobs": [entry(i, lp) for i, lp in r.top]}
                        for r in records], "refusal": None}


def completion(tok, records: list, offset: int = 0) -> dict:
    tokens, offsets = [], []
    for r in records:
        offsets.append(offset)
        t = _text(tok, r.id)
        tokens.append(t)
        offset += len(t)
    top = []
    for r in records:
        d: dict = {}
        for i, lp in r.top:
            d.setdefault(_text(tok, i), lp)  # two ids with one text: the likelier (listed first) stays
        top.append(d)
    return {"tokens": tokens, "token_logprobs": [r.logprob for r in records], "top_logprobs": top,
            "text_offset": offsets}
