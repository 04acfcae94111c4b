"""`tools` / `tool_choice` for `tl serve`'s chat completions, in llama.cpp's "generic" form that
works with any model: the tools are described in a system message, the reply is constrained (by the
JSON grammar, models/json_grammar.py) to one JSON object, either {"tool_call": {"name", "arguments"}}
or {"response": "..."}, and parsed back into OpenAI's `tool_calls` or `content`.

Invariants: with tool_choice "required" or a named function, the reply can only be a tool call
(of that function, whose arguments then follow its `parameters` schema); with "auto" it is exactly
one of the two forms; a reply cut by max_tokens is returned as text. Earlier turns keep their
meaning: an assistant message's tool_calls become the same JSON the model would have written, and
a "tool" message a user message holding {"tool_response": ...}.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from ..models.json_grammar import Node, compile_schema, one_property_object


@dataclass
class ToolSpec:
    tools: list[dict]  # [{"name", "description", "parameters"}]
    choice: str  # "auto", "required", or the one function's name
    root: Node  # the reply's schema

    def key(self) -> str:
        return json.dumps({"tools": self.tools, "choice": self.choice}, sort_keys=True)


def build(tools: list[dict], choice: str) -> ToolSpec:
    """The reply schema for `tools` (validated by the caller: name, description, parameters)."""
    if choice in ("auto", "required"):
        chosen = tools
    else:
        chosen = [t for t in tools if t["name"] == choice]
    if len(chosen) == 1:
        arguments = compile_schema(chosen[0]["parameters"] or {"type": "object"})
    else:
        arguments = compile_schema({"type": "object"})
    call = compile_schema({"type": "object", "properties": {"name": {"enum": [t["name"] for t in chosen]}},
                           "required": ["name"], "additionalProperties": False})
    call.props = call.props + [("arguments", arguments, True)]
    alternatives = [("tool_call", call)]
    if choice == "auto":
        alternatives.append(("response", compile_schema({"type": "string"})))
    return ToolSpec(tools, choice, one_property_object(alternatives))


def system_prompt(spec: ToolSpec) -> str:
    described = json.dumps([{"name": t["name"], "description": t["description"],
                             "parameters": t["parameters"] or {"type": "object"}} for t in spec.tools],
                           ensure_ascii=False)
    if spec.choice == "auto":
        how = ('Reply with one JSON object: {"tool_call": {"name": <tool name>, "arguments": {...}}} to call a '
               'tool, or {"response": "<your answer>"} to answer directly.')
    else:
        how = 'Reply with one JSON object that calls a tool: {"tool_call": {"name": <tool name>, "arguments": {...}}}.'
    return f"You can use these tools:\n{described}\n{how}"


def with_tools(messages: list[dict], spec: ToolSpec) -> list[dict]:
    """The conversation as the model sees it: the tools' description joined to the system message."""
    prompt = system_prompt(spec)
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": messages[0]["content"] + "\n\n" + prompt}] + messages[1:]
    return [{"role": "system", "content": prompt}] + messages


def assistant_call_text(tool_calls: list[dict]) -> str:
    """An earlier assistant turn's tool calls, as the JSON the model writes for them."""
    calls = []
    for c in tool_calls:
        f = c["function"]
        try:
            args = json.loads(f["arguments"]) if isinstance(f["arguments"], str) else f["arguments"]
        except ValueError:
            args = f["arguments"]
        calls.append({"tool_call": {"name": f["name"], "arguments": args}})
    return "\n".join(json.dumps(c, ensure_ascii=False) for c in calls)


def tool_result_text(content: str, tool_call_id: str | None) -> str:
    return json.dumps({"tool_response": {"tool_call_id": tool_call_id, "content": content}}, ensure_ascii=False)


def parse_reply(text: str) -> tuple[str | None, list[dict] | None]:
    """(content, tool_calls) of a constrained reply; a reply that is not a whole object (cut by
    max_tokens) is content as it stands."""
    try:
        value = json.loads(text)
    except ValueError:
        return text, None
    if isinstance(value, dict) and isinstance(value.get("tool_call"), dict):
        call = value["tool_call"]
        return None, [{"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                       "function": {"name": call.get("name"),
                                    "arguments": json.dumps(call.get("arguments", {}), ensure_ascii=False)}}]
    if isinstance(value, dict) and isinstance(value.get("response"), str):
        return value["response"], None
    return text, None
