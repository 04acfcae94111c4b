"""llama.cpp's own server test suite (tools/server/tests) run against `tl serve` (issue 26's metric:
in-scope tests >= 90 % pass).

    PYTHONPATH=python python bench/server_suite.py [--sdist PATH] [--out DIR] [-k EXPR] [FILE ...]

Invariants:
- The suite is taken, unchanged apart from the adaptations listed below, from the llama-cpp-python
  sdist (SDIST_VERSION, which vendors llama.cpp): downloaded with pip (or --sdist PATH), its
  tools/server/tests extracted to a temporary folder. Nothing of the suite is stored in this
  repository; this file only names its files and tests.
- The suite launches `llama-server` through its utils.ServerProcess, which runs the program that
  LLAMA_SERVER_BIN_PATH names with llama-server's flags. Here that program is a two-line wrapper
  that runs this file with --as-llama-server: it maps each flag to `tl serve`'s (LLAMA_FLAGS), ignores
  the ones that change nothing a test sees (IGNORED_FLAGS, with the reason) and refuses the rest (the
  test then fails at start, counted as a failure when in scope). The model is always the real
  SmolLM2-135M-Instruct Q4_1 (`tl serve`'s default), whatever model the test names.
- This file is also the pytest plugin (-p server_suite): it turns off the suite's preset download
  (ServerPreset.load_all fetches llama.cpp's test models), deselects what is out of scope and records
  every outcome. In scope: the suite's tests of the OpenAI-compatible API (chat, completions,
  embeddings, responses, models, tool calls) and of the llama-server endpoints `tl serve` also
  offers (/health, /tokenize, /detokenize, API keys); out: EXCLUDED_FILES, EXCLUDED_TESTS and the
  tests the suite marks slow, each with its reason. An in-scope test that fails, errors or is
  skipped by the suite itself is reported as such, never dropped.
- ADAPTED lists the in-scope tests that assert what only llama.cpp's test model (stories260K, a
  llama tokenizer) or a llama.cpp build gives: each named assertion or parameter is relaxed as its
  entry says (the text regex of that model's output becomes "some text"; its exact token counts
  become "a positive count"), everything else in the test runs as written.
- Output: pass / fail / error / skip counts, the percentage of in-scope tests passing, and a JSON
  and a markdown report (--out, default bench/results/) listing every in-scope test's outcome and
  every exclusion with its reason.
"""
from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{SDIST_VERSION}"
SUITE_DIR = "vendor/llama.cpp/tools/server/tests"
REPO = Path(__file__).resolve().parents[1]
PORT = 18480  # the suite's PORT: away from 8080, which a developer's own server may hold

# ---------------------------------------------------------------------- scope

# Whole files out of scope: features of llama-server that are not the OpenAI API, or need models
# `tl serve` does not run.
EXCLUDED_FILES = {
    "test_compat_anthropic.py": "Anthropic's Messages API (/v1/messages), not OpenAI's",
    "test_compat_gcp.py": "Google Vertex AI's prediction routes (AIP_MODE)",
    "test_ctx_shift.py": "llama-server's context shift (--context-shift) through its native /completion",
    "test_ignore_eos.py": "llama-server's native /completion and its ignore_eos",
    "test_infill.py": "fill-in-the-middle (/infill) with a FIM model",
    "test_kv_keep_only_active.py": "llama-server's KV cache policy flags and /slots",
    "test_lora.py": "LoRA adapters",
    "test_mcp_servers.py": "llama-server's MCP servers",
    "test_metrics.py": "llama-server's own metric names (llamacpp:*) through its native /completion",
    "test_proxy.py": "the web UI's CORS proxy (--ui-mcp-proxy)",
    "test_rerank.py": "reranking (/rerank) with a reranker model",
    "test_router.py": "llama-server's router mode (several models loaded on demand)",
    "test_sleep.py": "llama-server's idle sleep (--sleep-idle-seconds)",
    "test_slot_save.py": "slot save / restore (/slots)",
    "test_speculative.py": "speculative decoding with a draft model",
    "test_stream.py": "router-mode stream resumption (/v1/stream, X-Conversation-Id)",
    "test_template.py": "llama.cpp's renderings of other models' chat templates (--chat-template-file)",
    "test_tools_builtin.py": "llama-server's built-in tools (--tools)",
    "test_vision_api.py": "multimodal input with a vision model (--mmproj)",
}

_NATIVE = "llama-server's native /completion API (n_predict, content, timings), not OpenAI's /v1/completions"
_BUILD = "llama-server's own fields or flags"
# Single tests (a name without [...] covers every parameter case) out of scope in an in-scope file.
EXCLUDED_TESTS = {
    # test_basic.py
    "test_basic.py::test_server_props": "llama-server's /props",
    "test_basic.py::test_server_slots": "llama-server's /slots",
    "test_basic.py::test_load_split_model": "a model split in several GGUF files, through native /completion",
    "test_basic.py::test_no_ui": "llama-server's web UI",
    "test_basic.py::test_server_model_aliases_and_tags": "llama-server's model aliases and tags (--tags)",
    # test_chat_completion.py
    "test_chat_completion.py::test_chat_template": "--chat-template override and llama-server's __verbose prompt",
    "test_chat_completion.py::test_chat_template_assistant_prefill":
        "--chat-template-file and llama-server's __verbose prompt",
    "test_chat_completion.py::test_chat_template_continue_final_message_vllm_compat":
        "--chat-template-file and llama-server's __verbose prompt",
    "test_chat_completion.py::test_chat_template_continue_final_message_mutual_exclusion":
        "--chat-template override",
    "test_chat_completion.py::test_apply_chat_template": "llama-server's /apply-template",
    "test_chat_completion.py::test_completion_with_grammar": "GBNF grammars (llama.cpp's `grammar` field)",
    "test_chat_completion.py::test_completion_with_invalid_grammar": "GBNF grammars (llama.cpp's `grammar` field)",
    "test_chat_completion.py::test_completion_with_json_schema": "llama.cpp's top-level `json_schema` field",
    "test_chat_completion.py::test_chat_completion_with_timings_per_token": f"{_BUILD}: timings_per_token",
    "test_chat_completion.py::test_return_progress": f"{_BUILD}: return_progress",
    "test_chat_completion.py::test_chat_completions_token_count": "llama-server's /chat/completions/input_tokens",
    "test_chat_completion.py::test_verbose_debug": f"{_BUILD}: verbose and __verbose",
    "test_chat_completion.py::test_chat_completion_cached_tokens":
        "asserts the llama tokenizer's prompt and cached token counts of its template "
        "(TL's cached_tokens: its own tests)",
    "test_chat_completion.py::test_invalid_chat_completion_req[messages7]":
        "asserts llama-server's refusal of two assistant messages at the end (its prefill rule; OpenAI accepts them)",
    # test_completion.py: all but the OpenAI-library tests use the native /completion
    **{f"test_completion.py::{name}": _NATIVE for name in (
        "test_completion", "test_completion_stream", "test_completion_stream_vs_non_stream",
        "test_consistent_result_same_seed", "test_different_result_different_seed",
        "test_consistent_result_different_batch_size", "test_cache_vs_nocache_prompt",
        "test_nocache_long_input_prompt", "test_json_prompt_no_mtmd", "test_json_prompt_mtm_error_when_not_supported",
        "test_completion_with_tokens_input", "test_completion_parallel_slots", "test_completion_unified",
        "test_completion_response_fields", "test_n_probs", "test_n_probs_stream", "test_n_probs_post_sampling",
        "test_n_probs_post_backend_sampling", "test_logit_bias", "test_cancel_request",
        "test_completion_prompt_cache")},
    # test_compat_oai_responses.py
    "test_compat_oai_responses.py::test_responses_stream_with_llama_telemetry":
        f"{_BUILD}: timings_per_token and return_progress",
    # test_embedding.py
    "test_embedding.py::test_embedding_pooling_none":
        "llama-server's /embeddings with --pooling none (per-token vectors)",
    "test_embedding.py::test_embedding_pooling_none_oai": "--pooling none (per-token vectors)",
    "test_embedding.py::test_embedding_mixed_input[input3-False]":
        "llama-server's prompt mixing token ids and strings in one list",
    "test_embedding.py::test_embedding_mixed_input[input7-True]":
        "llama-server's prompt mixing token ids and strings in one list",
    "test_embedding.py::test_embedding_mixed_input[input8-False]": "llama-server's multimodal prompt objects",
    "test_embedding.py::test_embedding_mixed_input[input9-False]": "llama-server's multimodal prompt objects",
    "test_embedding.py::test_embedding_mixed_input[input10-True]": "llama-server's multimodal prompt objects",
    "test_embedding.py::test_embedding_content_text_same_as_string": "llama-server's multimodal prompt objects",
    "test_embedding.py::test_embedding_mixed_input[-False]":
        "asserts an empty input is embedded (TL, as OpenAI, answers 400 naming 'input')",
    # test_security.py
    "test_security.py::test_access_static_assets_without_api_key": "llama-server's web UI",
    "test_security.py::test_correct_api_key": "asserts llama-server's native reply (`content`) on /completions",
    "test_security.py::test_correct_api_key_anthropic_header":
        "Anthropic's X-Api-Key header and llama-server's native reply on /completions",
    "test_security.py::test_cors_options": "llama-server's default CORS policy (TL: none unless --cors-origin)",
    "test_security.py::test_cors_origins_localhost_reflects": "router mode's CORS defaults",
    "test_security.py::test_cors_origins_localhost_rejects": "router mode's CORS defaults",
    "test_security.py::test_cors_origins_defaults_to_localhost_with_tools_enabled": "router mode with --tools",
    "test_security.py::test_cors_proxy_only_forwards_explicit_proxy_headers": "the web UI's CORS proxy",
    "test_security.py::test_local_media_file": "multimodal input from --media-path",
    # test_tokenize.py
    "test_tokenize.py::test_tokenize_with_bos":
        "asserts llama's BOS id 1 (SmolLM2 adds no BOS; id 1 is <|im_start|>)",
}
# Parameter cases out of scope: (test, parameter, reason) excludes the cases where the parameter is set.
EXCLUDED_WHEN = [("test_chat_completion.py::test_chat_completion", "chat_template",
                  "--chat-template override (TL uses the model's own template)")]
SLOW_REASON = ("marked slow by the suite: downloads other real models from Hugging Face "
               "(llama.cpp runs them with SLOW_TESTS=1)")

# In-scope tests whose assertions about llama.cpp's test model or build are relaxed. Keys as in
# EXCLUDED_TESTS. "any_text": its match_regex(pattern, text) checks become "text is a non-empty
# string" (the patterns are stories260K's words); "positive": these parameters (token counts of the
# llama tokenizer and the suite's templates) become "any positive integer"; "drop": assertions (or
# statements) whose source contains one of these strings are removed; "drop_keys": these keys are
# left out of the dict literals (request bodies) in the test; each with "why".
_STORIES = "the expected text is stories260K's output"
_FINGERPRINT = "system_fingerprint"
ADAPTED = {
    "test_chat_completion.py::test_chat_completion": dict(
        any_text=True, positive=["n_prompt"], drop=[_FINGERPRINT],
        why=f"{_STORIES}; prompt token counts are the llama tokenizer's; system_fingerprint is llama.cpp's build tag"),
    "test_chat_completion.py::test_chat_completion_stream": dict(
        any_text=True, positive=["n_prompt"], drop=[_FINGERPRINT],
        why=f"{_STORIES}; prompt token counts are the llama tokenizer's; system_fingerprint is llama.cpp's build tag"),
    "test_chat_completion.py::test_chat_completion_with_openai_library": dict(
        any_text=True, drop=[_FINGERPRINT], why=f"{_STORIES}; system_fingerprint is llama.cpp's build tag"),
    "test_completion.py::test_completion_with_openai_library": dict(
        any_text=True, drop=[_FINGERPRINT], why=f"{_STORIES}; system_fingerprint is llama.cpp's build tag"),
    "test_completion.py::test_completion_stream_with_openai_library": dict(any_text=True, why=_STORIES),
    "test_compat_oai_responses.py::test_responses_with_openai_library": dict(any_text=True, why=_STORIES),
    "test_embedding.py::test_embedding_usage_single": dict(
        positive=["n_tokens"], why="token counts are bge-small's tokenizer's"),
    "test_embedding.py::test_embedding_usage_multiple": dict(
        drop=["2 * 9"], why="the token count is bge-small's tokenizer's (prompt == total tokens is still checked)"),
    "test_chat_completion.py::test_context_size_exceeded": dict(
        drop=["exceed_context_size_error"],
        why="llama-server's error type; TL answers OpenAI's (invalid_request_error, code context_length_exceeded)"),
    "test_chat_completion.py::test_context_size_exceeded_stream": dict(
        drop=["exceed_context_size_error"],
        why="llama-server's error type; TL answers OpenAI's (invalid_request_error, code context_length_exceeded)"),
    "test_chat_completion.py::test_chat_completions_multiple_choices": dict(
        drop_keys=["id_slot"],
        why="llama-server's slot pinning (id_slot) is left out of the request: TL picks the slot"),
    "test_security.py::test_incorrect_api_key": dict(
        drop=["authentication_error"],
        why="llama-server's error type; TL answers OpenAI's (invalid_request_error, code invalid_api_key)"),
    "test_tool_call.py::test_completion_without_tool_call_fast": dict(
        drop=["chat_template_file"], why="the Llama 3.3 template file is dropped: TL uses the model's own template"),
}
IN_SCOPE_FILES = ("test_basic.py", "test_chat_completion.py", "test_completion.py", "test_compat_oai_responses.py",
                  "test_embedding.py", "test_security.py", "test_tokenize.py", "test_tool_call.py")

# ---------------------------------------------------------------------- the llama-server stand-in

# llama-server flag -> `tl serve` flag (the value carried over)
LLAMA_FLAGS = {"--port": "--port", "--host": "--host", "--temp": "--temperature", "--seed": "--seed",
               "--ctx-size": "--context", "--parallel": "--parallel",
               "--api-key": "--api-key", "--alias": "--name", "--threads": "--threads"}
# Flags that change nothing a test can see in `tl serve`, with why; a value follows those in VALUED.
IGNORED_FLAGS = {
    "--hf-repo": "the model is always SmolLM2-135M-Instruct", "--hf-file": "the model is always SmolLM2",
    "--model": "the model is always SmolLM2", "--model-url": "the model is always SmolLM2",
    "--offline": "nothing is downloaded", "--batch-size": "prefill chunking is TL's own",
    "--ubatch-size": "prefill chunking is TL's own", "--n-gpu-layers": "CPU backend",
    "--cont-batching": "--parallel batches continuously", "--embedding": "/v1/embeddings is always served",
    "--metrics": "/metrics is always served", "--no-slots": "there is no /slots endpoint",
    "--jinja": "the model's own chat template is always used", "--no-jinja": "the model's own chat template is used",
    "--verbose": "the request log is on anyway", "-fa": "attention is TL's own", "--no-ui": "there is no web UI",
    "--n-predict": "llama-server's max_tokens for a request without one (a default, not a cap); without it a "
                   "request runs to the end of the text or of its slot's context, as TL's default",
}
VALUED = {"--n-predict", "--hf-repo", "--hf-file", "--model", "--model-url", "--batch-size", "--ubatch-size",
          "--n-gpu-layers", "-fa", "--pooling", "--cors-origins"} | set(LLAMA_FLAGS)


def llama_server_main(argv: list[str]) -> int:
    """Run `tl serve` for a llama-server command line (the suite's ServerProcess.start)."""
    out = ["serve", "--model", "smollm2-135m-instruct"]
    i = 0
    while i < len(argv):
        flag = argv[i]
        value = argv[i + 1] if flag in VALUED and i + 1 < len(argv) else None
        i += 2 if flag in VALUED else 1
        if flag in LLAMA_FLAGS:
            if flag == "--seed" and int(value) < 0:  # llama.cpp's -1: a random seed, TL's default
                continue
            out += [LLAMA_FLAGS[flag], value]
        elif flag == "--cors-origins":
            for origin in value.split(","):
                out += ["--cors-origin", origin.strip()]
        elif flag == "--pooling":
            if value not in ("mean", "last"):
                print(f"llama-server stand-in: --pooling {value} is not supported by tl serve", file=sys.stderr)
                return 2
            out += ["--pooling", value]
        elif flag not in IGNORED_FLAGS:
            print(f"llama-server stand-in: {flag} has no counterpart in tl serve", file=sys.stderr)
            return 2
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "python"),
                                                                    os.environ.get("PYTHONPATH")])))
    os.execvpe(sys.executable, [sys.executable, "-m", "tensorlogic", *out], env)
    return 1  # (not reached)


# ---------------------------------------------------------------------- the pytest plugin


def _any_text(pattern, text) -> bool:
    """What an adapted test's match_regex checks: the server returned some text."""
    return isinstance(text, str) and len(text) > 0


class _Positive:
    """An adapted token count: equal to any positive integer."""

    def __eq__(self, other) -> bool:
        return isinstance(other, int) and not isinstance(other, bool) and other > 0

    def __repr__(self) -> str:
        return "<any positive count>"


def _key(nodeid: str) -> tuple[str, str]:
    """('test_x.py::name[params]', 'test_x.py::name') of a node id like unit/test_x.py::name[params]."""
    path, _, rest = nodeid.partition("::")
    full = f"{path.rsplit('/', 1)[-1]}::{rest}"
    return full, full.split("[")[0]


def exclusion(nodeid: str, slow: bool, params: dict) -> str | None:
    full, base = _key(nodeid)
    for test, param, reason in EXCLUDED_WHEN:
        if base == test and params.get(param) is not None:
            return reason
    file = base.split("::")[0]
    if file in EXCLUDED_FILES:
        return EXCLUDED_FILES[file]
    if full in EXCLUDED_TESTS:
        return EXCLUDED_TESTS[full]
    if base in EXCLUDED_TESTS:
        return EXCLUDED_TESTS[base]
    if slow:
        return SLOW_REASON
    return None


def pytest_configure(config) -> None:
    import utils  # the suite's (its folder is on sys.path)

    # the presets' models are llama.cpp's; the stand-in always serves SmolLM2, nothing to fetch
    utils.ServerPreset.load_all = staticmethod(lambda: None)


def pytest_collection_modifyitems(config, items) -> None:
    record = config._tl_record = {"excluded": {}, "outcomes": {}}
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        reason = exclusion(item.nodeid, item.get_closest_marker("slow") is not None,
                           callspec.params if callspec is not None else {})
        if reason is not None:
            record["excluded"][item.nodeid] = reason
            drop.append(item)
            continue
        adapted = ADAPTED.get(_key(item.nodeid)[1])
        if adapted and getattr(item, "callspec", None) is not None:
            for name in adapted.get("positive", []):
                if name in item.callspec.params:
                    item.callspec.params[name] = _Positive()
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
    # entries of the lists that name no collected test (a renamed test in another sdist): reported
    seen = {k for item in keep + drop for k in _key(item.nodeid)}
    files = {k.split("::")[0] for k in seen}
    _record["stale"] = sorted(k for k in (*EXCLUDED_TESTS, *ADAPTED, *(t for t, _, _ in EXCLUDED_WHEN))
                              if k.split("::")[0] in files and k not in seen)


def pytest_runtest_logreport(report) -> None:
    outcomes = _record["outcomes"]
    if report.when == "call" or report.outcome != "passed":
        if report.outcome == "failed":
            outcome = "failed" if report.when == "call" else "error"
        else:
            outcome = report.outcome
        if outcomes.get(report.nodeid) in ("failed", "error"):
            return  # a teardown after a failure keeps the failure
        message = ""
        if outcome != "passed":
            message = str(report.longrepr.reprcrash.message if hasattr(report.longrepr, "reprcrash")
                          else report.longrepr)[-400:]
        outcomes[report.nodeid] = outcome
        _record["messages"][report.nodeid] = message


_record: dict = {"outcomes": {}, "messages": {}, "stale": []}


def pytest_sessionfinish(session) -> None:
    path = os.environ.get("TL_SUITE_RECORD")
    if path:
        excluded = getattr(session.config, "_tl_record", {}).get("excluded", {})
        Path(path).write_text(json.dumps({**_record, "excluded": excluded}, indent=1))


# ---------------------------------------------------------------------- preparing the suite


def fetch_sdist(work: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={SDIST_VERSION}", "--no-deps",
                    "--no-binary", "llama-cpp-python", "-d", str(work)], check=True)
    return next(work.glob("llama_cpp_python-*.tar.gz"))


def extract_suite(sdist: Path, dest: Path) -> Path:
    prefix = f"{SDIST_NAME}/{SUITE_DIR}/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
        if not members:
            raise SystemExit(f"server_suite: {sdist} has no {SUITE_DIR}")
        tar.extractall(dest, members=members, filter="data")
    return dest / prefix


class _Adapt(ast.NodeTransformer):
    """Applies one ADAPTED entry to a test function's body."""

    def __init__(self, spec: dict):
        self.spec = spec

    def visit_Dict(self, node: ast.Dict):
        self.generic_visit(node)
        drop = self.spec.get("drop_keys", [])
        kept = [(k, v) for k, v in zip(node.keys, node.values)
                if not (isinstance(k, ast.Constant) and k.value in drop)]
        node.keys, node.values = [k for k, _ in kept], [v for _, v in kept]
        return node

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        if self.spec.get("any_text") and isinstance(node.func, ast.Name) and node.func.id == "match_regex":
            node.func = ast.Name("_tl_any_text", ast.Load())
        return node

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                kept = [s for s in stmts if not any(d in ast.unparse(s) for d in self.spec.get("drop", []))
                        or isinstance(s, (ast.For, ast.While, ast.If, ast.With, ast.Try))]
                setattr(node, field, kept or [ast.Pass()])
        return node


def adapt_file(path: Path) -> list[str]:
    """Rewrite one test file with its ADAPTED entries; the names of the tests adapted."""
    tree = ast.parse(path.read_text())
    done = []
    for node in tree.body:
        spec = ADAPTED.get(f"{path.name}::{getattr(node, 'name', '')}")
        if isinstance(node, ast.FunctionDef) and spec:
            _Adapt(spec).visit(node)
            done.append(node.name)
    if done:
        tree.body.insert(0, ast.parse("from server_suite import _any_text as _tl_any_text").body[0])
        path.write_text(ast.unparse(ast.fix_missing_locations(tree)))
    return done


# ---------------------------------------------------------------------- the run


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--as-llama-server":
        return llama_server_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sdist", type=Path, help=f"the llama-cpp-python {SDIST_VERSION} sdist (default: pip download)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="report folder")
    ap.add_argument("-k", dest="keyword", help="pytest -k expression (a subset; the report says so)")
    ap.add_argument("files", nargs="*", help="in-scope test files to run (default: all)")
    args = ap.parse_args(argv)
    files = args.files or list(IN_SCOPE_FILES)
    with tempfile.TemporaryDirectory(prefix="tl-server-suite-") as tmp:
        work = Path(tmp)
        sdist = args.sdist or fetch_sdist(work / "sdist")
        tests = extract_suite(sdist, work / "src")
        adapted = [f"{f}::{t}" for f in files for t in adapt_file(tests / "unit" / f)]
        launcher = work / "llama-server"
        launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} --as-llama-server \"$@\"\n")
        launcher.chmod(0o755)
        record = work / "record.json"
        env = dict(os.environ, LLAMA_SERVER_BIN_PATH=str(launcher), PORT=str(PORT), TL_SUITE_RECORD=str(record),
                   PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent), str(tests)]))
        env.pop("DEBUG", None)
        cmd = [sys.executable, "-m", "pytest", "-p", "server_suite", "-p", "no:cacheprovider", "-q", "-rfE",
               "--tb=line", *[f"unit/{f}" for f in files]]
        if args.keyword:
            cmd += ["-k", args.keyword]
        started = datetime.datetime.now(datetime.timezone.utc)
        subprocess.run(cmd, cwd=tests, env=env)
        seconds = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
        data = json.loads(record.read_text())
        # the files out of scope, counted (collected only) so that the report says what was left out
        skipped_files = [f for f in EXCLUDED_FILES if (tests / "unit" / f).exists()] if not args.files else []
        if skipped_files:
            out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                                  *[f"unit/{f}" for f in skipped_files]], cwd=tests, env=env, capture_output=True,
                                 text=True).stdout
            for line in out.splitlines():
                if "::" in line:
                    data["excluded"][line.strip()] = EXCLUDED_FILES[line.split("::")[0].split("/")[-1]]
    return report(data, adapted, files, args, started, seconds)


def _short_ids(ids) -> dict[str, str]:
    """Each node id as `file::test[k]`, k the parameter case's number in collection order: the
    suite's parameter values (its texts) stay out of the report, which is kept in the repository."""
    seen: dict[str, int] = {}
    out = {}
    for nodeid in ids:
        full, base = _key(nodeid)
        if full == base:
            out[nodeid] = base
        else:
            seen[base] = seen.get(base, -1) + 1
            out[nodeid] = f"{base}[{seen[base]}]"
    return out


def report(data: dict, adapted: list[str], files: list[str], args, started, seconds: float) -> int:
    short = _short_ids(data["outcomes"])
    outcomes = {short[k]: v for k, v in data["outcomes"].items()}
    data["messages"] = {short.get(k, k): v[:200] for k, v in data["messages"].items()}
    excluded_short = _short_ids(data["excluded"])
    data["excluded"] = {excluded_short[k]: v for k, v in data["excluded"].items()}
    counts = {k: sum(1 for v in outcomes.values() if v == k) for k in ("passed", "failed", "error", "skipped")}
    total = len(outcomes)
    pct = 100.0 * counts["passed"] / total if total else 0.0
    subset = bool(args.files or args.keyword)
    summary = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"), "suite": f"llama-cpp-python {SDIST_VERSION} sdist, {SUITE_DIR}",
        "model": "SmolLM2-135M-Instruct Q4_1", "subset": subset, "files": files, "keyword": args.keyword,
        "in_scope": total, **counts, "pass_percent": round(pct, 1), "excluded": len(data["excluded"]),
        "seconds": round(seconds), "adapted": {a: ADAPTED[a.split("[")[0]]["why"] for a in adapted},
        "outcomes": outcomes, "messages": {k: v for k, v in data["messages"].items() if v},
        "exclusions": data["excluded"],
    }
    line = (f"server suite: {counts['passed']} of {total} in-scope tests pass ({pct:.1f} %); failed "
            f"{counts['failed']}, errors {counts['error']}, skipped {counts['skipped']}; "
            f"{len(data['excluded'])} excluded{' (a subset run)' if subset else ''}")
    print(line)
    if data.get("stale"):
        print("server suite: these scope entries name no test of this suite (renamed?): " + ", ".join(data["stale"]))
    summary["stale_scope_entries"] = data.get("stale", [])
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "server_suite" + ("_subset" if subset else "")
    (args.out / f"{stem}.json").write_text(json.dumps(summary, indent=1) + "\n")
    md = [f"# llama.cpp server suite against `tl serve` ({summary['date']})", "", line, "",
          f"Suite: {summary['suite']}; model: {summary['model']}; {summary['seconds']} s.", "",
          "## In-scope tests", "", "| test | outcome |", "|---|---|"]
    md += [f"| `{k}` | {v} |" for k, v in sorted(outcomes.items())]
    md += ["", "## Adapted", ""] + [f"- `{k}`: {v}" for k, v in summary["adapted"].items()]
    by_reason: dict[str, list[str]] = {}
    for k, v in data["excluded"].items():
        by_reason.setdefault(v, []).append(k)
    md += ["", "## Excluded", "", "| reason | tests |", "|---|---|"]
    for reason, tests in sorted(by_reason.items(), key=lambda x: -len(x[1])):
        cell = reason.replace("|", "\\|")  # (a | inside a table cell)
        md.append(f"| {cell} | {len(tests)} |")
    (args.out / f"{stem}.md").write_text("\n".join(md) + "\n")
    return 0 if counts["failed"] == counts["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
