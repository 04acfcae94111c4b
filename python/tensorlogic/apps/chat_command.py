"""`tl chat`: a conversation on the terminal (or one turn with --prompt), its /commands, and the
context-full rule (the oldest exchanges are dropped, and the user is told).

Invariant: replies go to stdout; every /command answers on stderr, so stdout holds only replies.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..models import bounded_json
from ..models.errors import ModelError
from .console import write_stdout
from .generate_command import no_template_note, prefill_progress, print_stats
from .llm_session import CHAT_CONTEXT, GenerationResult, LlmSession


CHAT_HELP = """\
/help          this list
/clear         forget the conversation (the system message stays)
/system TEXT   set the system message (/system alone removes it)
/save FILE     write the conversation as JSON
/load FILE     read a conversation written by /save (replaces this one)
/stats         the last reply's speed and how full the context is
/exit, /quit   leave the chat (as Ctrl-D)
//TEXT         send a message that begins with /TEXT
Ctrl-C stops a reply, Ctrl-D exits."""


class ChatState:
    """The conversation of `tl chat`: an optional system message, then user/assistant turns, and
    what the last reply cost. When a prompt no longer fits the context the oldest exchanges are
    dropped, and `tl chat` says so."""

    def __init__(self, system: str | None = None):
        self.system = system
        self.turns: list[tuple[str, str]] = []
        self.last: GenerationResult | None = None

    def messages(self) -> list[tuple[str, str]]:
        return ([("system", self.system)] if self.system else []) + list(self.turns)

    def to_json(self, model: str) -> dict:
        return {"model": model, "messages": [{"role": r, "content": c} for r, c in self.messages()]}

    def load_json(self, data: Any) -> None:
        messages = data.get("messages") if isinstance(data, dict) else data
        if not isinstance(messages, list):
            raise ValueError('expected {"messages": [...]} or a list of messages')
        system, turns = None, []
        for i, m in enumerate(messages):
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise ValueError(f"message {i} is not {{\"role\": \"...\", \"content\": \"...\"}}")
            role = m["role"]
            if role == "system" and i == 0:
                system = m["content"]
            elif role in ("user", "assistant"):
                turns.append((role, m["content"]))
            else:
                raise ValueError(f"message {i} has role {role!r} (expected user or assistant"
                                 f"{', or system first' if i else ' or system'})")
        self.system, self.turns = system, turns


def run_chat(session: LlmSession, args, sampling: dict) -> int:
    if session.requested_context is None:
        session.requested_context = CHAT_CONTEXT
    state = ChatState()
    if not session.has_chat_template:
        ignored = "; --system is ignored" if args.system else ""
        no_template_note(session, f"each message is completed as raw text, without history{ignored}")
    elif args.system:
        state.system = args.system
    if args.prompt is not None:
        reply = _chat_turn(session, state, args.prompt, args, sampling)
        return 0 if reply is not None else 130
    interactive = sys.stdin.isatty()
    if interactive:
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
        print(f"Chatting with {session.config.name} ({session.model.path.name}). "
              "/help lists commands; Ctrl-C stops a reply, Ctrl-D exits.", file=sys.stderr)
    while True:
        try:
            line = input("> " if interactive else "")
        except EOFError:
            if interactive:
                print(file=sys.stderr)
            return 0
        except KeyboardInterrupt:
            print(file=sys.stderr)
            continue
        if not line.strip():
            continue
        if line.startswith("/") and not line.startswith("//"):
            if not _chat_command(session, state, line.strip()):
                return 0
            continue
        if line.startswith("//"):
            line = line[1:]
        try:
            _chat_turn(session, state, line, args, sampling)
        except ModelError as e:  # this turn failed (e.g. too long for the context); the chat goes on
            print(f"tl: error: {e}", file=sys.stderr)
            if state.turns and state.turns[-1][0] == "user":
                state.turns.pop()


def _chat_command(session: LlmSession, state: ChatState, line: str) -> bool:
    """One /command of `tl chat`; its answer goes to stderr (stdout holds only replies). False when
    the command ends the chat."""
    name, _, rest = line.partition(" ")
    rest = rest.strip()

    def say(text: str) -> None:
        print(text, file=sys.stderr)

    if name in ("/exit", "/quit", "/bye"):
        return False
    if name == "/help":
        say(CHAT_HELP)
    elif name == "/clear":
        state.turns = []
        say("[conversation cleared" + (", system message kept]" if state.system else "]"))
    elif name == "/system":
        if not session.has_chat_template:
            say("tl: error: this model has no chat template, so it takes no system message")
            return True
        state.system = rest or None
        say(f"[system message set: {rest}]" if rest else "[system message removed]")
    elif name in ("/save", "/load"):
        if not rest:
            say(f"tl: error: {name} needs a file name ({name} FILE)")
            return True
        path = Path(rest).expanduser()
        if name == "/save":
            try:
                path.write_text(json.dumps(state.to_json(session.config.name), ensure_ascii=False, indent=1) + "\n",
                                encoding="utf-8")
            except OSError as e:
                say(f"tl: error: cannot write {rest}: {e.strerror or e}")
                return True
            say(f"[saved {len(state.messages())} messages to {rest}]")
        else:
            if path.exists() and not path.is_file():  # a FIFO or /dev/zero would block or never end
                say(f"tl: error: cannot read {rest}: not a regular file")
                return True
            try:
                data = bounded_json.loads(path.read_text(encoding="utf-8"))
                state.load_json(data)
            except OSError as e:
                say(f"tl: error: cannot read {rest}: {e.strerror or e}")
                return True
            except (ValueError, UnicodeDecodeError) as e:  # json.JSONDecodeError is a ValueError
                say(f"tl: error: {rest} is not a saved conversation: {' '.join(str(e).split())}")
                return True
            if not session.has_chat_template and (state.system or state.turns):
                say("[note: this model has no chat template; its replies do not see the history]")
            say(f"[loaded {len(state.messages())} messages from {rest}]")
    elif name == "/stats":
        used = len(session.chat_prompt_ids(state.messages(), add_generation_prompt=False)) \
            if session.has_chat_template and state.messages() else 0
        say(f"[conversation: {len(state.turns)} turns, {used} of {session.capacity} context tokens]")
        if state.last is not None:
            print_stats(session, state.last)
    else:
        say(f"tl: error: unknown command {name} (/help lists them; //TEXT sends a message starting with /)")
    return True


def _chat_turn(session: LlmSession, state: ChatState, user_text: str, args, sampling: dict) -> str | None:
    if session.has_chat_template:
        state.turns.append(("user", user_text))
        prompt_ids = session.chat_prompt_ids(state.messages())
        # room for the reply: its max tokens, but at most a quarter of the context
        room = max(1, min(args.max_tokens, session.capacity // 4))
        dropped = 0
        while len(prompt_ids) + room > session.capacity and _drop_oldest_turn(state.turns):
            dropped += 1
            prompt_ids = session.chat_prompt_ids(state.messages())
        if dropped:
            kept = len(state.turns) // 2
            print(f"[context full ({session.capacity} tokens): dropped the oldest "
                  f"{'exchange' if dropped == 1 else f'{dropped} exchanges'}; {kept} earlier "
                  f"exchange{'' if kept == 1 else 's'} kept]", file=sys.stderr)
    else:  # a base model: complete this message alone, as raw text
        prompt_ids = session.raw_prompt_ids(user_text)
    result = session.generate(prompt_ids, args.max_tokens, on_text=write_stdout, on_prefill=prefill_progress(),
                              **sampling)
    state.last = result
    if result.stopped_by == "interrupt":
        write_stdout(" [stopped]")
    write_stdout("\n")
    if session.has_chat_template:
        state.turns.append(("assistant", result.text))
    if args.stats:
        print_stats(session, result)
    return result.text if result.stopped_by != "interrupt" else None


def _drop_oldest_turn(turns: list) -> bool:
    """Forget the oldest user/assistant exchange; False if only the newest message is left."""
    if len(turns) <= 1:
        return False
    del turns[0:2]
    return True
