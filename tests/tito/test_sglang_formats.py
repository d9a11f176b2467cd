"""Tool-call and reasoning formats parsed as SGLang 0.5.23's detectors of the same
names parse them. Each expected value follows a case of SGLang's own parser tests,
named in the case's id: ``test/srt/test_function_call_parser.py`` (``srt``) and
``test/registered/unit/function_call/test_hermes_detector.py`` (``hermes``). Every
case runs whole and one character at a time (a stream and a whole answer agree)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from seedproxy.tito.reasoning import REASONING_PARSERS, Held
from seedproxy.tito.tool_parsers import TOOL_PARSERS
from seedproxy.tito.tools.glm import argument_value
from seedproxy.tito.tools.mistral import mistral_call_id

WEATHER = '{"name": "get_weather", "arguments": {"city": "Beijing"}}'
SEARCH = '{"name": "search", "arguments": {"query": "restaurants"}}'
FIRST, SECOND = f"<tool_call>{WEATHER}</tool_call>", f"<tool_call>{SEARCH}</tool_call>"
BJ, REST = ("get_weather", {"city": "Beijing"}), ("search", {"query": "restaurants"})
TB, TC, TCE = "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
SEP, TE = "<｜tool▁sep｜>", "<｜tool▁calls▁end｜>"
KB, KE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
KC, KA, KCE = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def run(name: str, text: str, tools: list[dict[str, Any]] | None = None
        ) -> list[tuple[str, list[tuple[str, Any]]]]:
    """(content, calls) for ``text`` whole and streamed a character at a time; the
    content trimmed as the assistant message trims it."""
    out = []
    for pieces in ([text], list(text)):
        parser, held = TOOL_PARSERS[name](tools or []), Held()
        shown = "".join(held.feed(parser.feed(p)) for p in pieces)
        rest, calls = parser.finish()
        out.append((shown + held.feed(rest),
                    [(c.name, json.loads(c.arguments)) for c in calls]))
    return out


@pytest.mark.parametrize(("name", "text", "content", "calls"), [
    pytest.param("hermes", f"Before {FIRST} between {SECOND} after",
                 "Before  between  after", [BJ, REST],
                 id="hermes:test_finish_drains_complete_calls_from_one_delta"),
    pytest.param("hermes", FIRST + "after", "after", [BJ],
                 id="hermes:test_finish_preserves_partial_marker_after_complete_call"),
    pytest.param("hermes", '<tool_call>{"name": "search", "arguments": {"query": '
                 '"literal </tool_call> and <tool_call>"}}</tool_call>', "",
                 [("search", {"query": "literal </tool_call> and <tool_call>"})],
                 id="hermes:test_finish_keeps_delimiters_inside_arguments"),
    pytest.param("qwen25", '<tool_call>\n{not valid json}\n</tool_call>\n<tool_call>\n'
                 '{"name": "search", "arguments": {"query": "books"}}\n</tool_call>',
                 "<tool_call>\n{not valid json}\n</tool_call>", [("search", {"query": "books"})],
                 id="qwen25:test_malformed_json_is_skipped(the block stays content)"),
    pytest.param("llama3", 'Some intro. <|python_tag|>{"name": "get_weather", '
                 '"parameters": {}}', "Some intro.", [("get_weather", {})],
                 id="srt:TestLlama32Detector.test_with_python_tag_prefix"),
    pytest.param("llama3", '{"name": "get_weather", "parameters": {}} Some follow-up text',
                 "Some follow-up text", [("get_weather", {})],
                 id="srt:TestLlama32Detector.test_json_with_trailing_text"),
    pytest.param("llama3", '<|python_tag|>{"name": "get_weather", "parameters": '
                 '{"city": "Paris"}};{"name": "get_tourist_attractions", "parameters": '
                 '{"city": "Paris"}}', "", [("get_weather", {"city": "Paris"}),
                                            ("get_tourist_attractions", {"city": "Paris"})],
                 id="srt:TestLlama32Detector.test_multiple_json_with_separator"),
    pytest.param("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {}}'
                 '<|python_tag|>{"name": "get_tourist_attractions", "parameters": {}}', "",
                 [("get_weather", {}), ("get_tourist_attractions", {})],
                 id="srt:TestLlama32Detector.test_multiple_json_with_separator_customized"),
    pytest.param("mistral", 'Here is some text before the tool call: [TOOL_CALLS] '
                 '[{"name":"make_next_step_decision", "arguments":{"decision":"ANSWER", '
                 '"content":"The answer is 42"}}]', "Here is some text before the tool call:",
                 [("make_next_step_decision", {"decision": "ANSWER",
                                               "content": "The answer is 42"})],
                 id="srt:TestMistralDetector.test_detect_and_parse_with_text_before_tool_call"),
    pytest.param("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'
                 '[TOOL_CALLS]search[ARGS]{"query": "restaurants"}', "",
                 [("get_weather", {"city": "Paris"}), REST],
                 id="mistral_detector.py:compact [TOOL_CALLS]name[ARGS]{...}, repeated"),
    pytest.param("mistral", 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "a [b] {c}"} done',
                 "Sure. done", [("get_weather", {"city": "a [b] {c}"})],
                 id="mistral_detector.py:compact, brackets in arguments, text after"),
    pytest.param("deepseekv3", f"{TB}{TC}function{SEP}get_weather\n```json\n"
                 f'{{"city": "Shanghai"}}\n```{TCE}\n{TC}function{SEP}get_tourist_attractions'
                 f'\n```json\n{{"city": "Beijing"}}\n```{TCE}{TE}', "",
                 [("get_weather", {"city": "Shanghai"}),
                  ("get_tourist_attractions", {"city": "Beijing"})],
                 id="srt:TestDeepSeekV3Detector.test_parse_streaming_multiple_tool_calls"
                    "_with_multi_token_chunk"),
    pytest.param("deepseekv31", f'Let me check.{TB}{TC}get_weather{SEP}{{"location": "Tokyo"}}'
                 f'{TCE}{TC}get_weather{SEP}{{"location": "Paris"}}{TCE}{TE}', "Let me check.",
                 [("get_weather", {"location": "Tokyo"}), ("get_weather", {"location": "Paris"})],
                 id="deepseekv31_detector.py:docstring example"),
    pytest.param("kimi_k2", f"{KB}{KC}functions.get_weather:0{KA}{{\"city\": \"Paris\"}}"
                 f"{KCE}{KE}", "", [("get_weather", {"city": "Paris"})],
                 id="srt:TestKimiK2Detector.test_single_tool_call"),
    pytest.param("kimi_k2", f"Checking.{KB}{KC}functions.get_weather:0{KA}{{\"city\": "
                 f"\"Paris\"}}{KCE}{KC}functions.get_tourist_attractions:1{KA}{{\"city\": "
                 f"\"London\"}}{KCE}{KE}", "Checking.",
                 [("get_weather", {"city": "Paris"}),
                  ("get_tourist_attractions", {"city": "London"})],
                 id="srt:TestKimiK2Detector.test_multiple_tool_calls"),
    # pythonic: SGLang 0.5.23's PythonicDetector run from its wheel on these texts (whole
    # and streamed a character at a time gave these results)
    pytest.param("pythonic", '[get_weather(city="Paris"), search(query="restaurants", '
                 'limit=3)]', "", [("get_weather", {"city": "Paris"}),
                                   ("search", {"query": "restaurants", "limit": 3})],
                 id="pythonic_detector.py: two calls"),
    pytest.param("pythonic", 'Let me check. [get_weather(city="Paris", units="c")]',
                 "Let me check.", [("get_weather", {"city": "Paris", "units": "c"})],
                 id="pythonic_detector.py: text before"),
    pytest.param("pythonic", '[get_weather(city="Paris")] Done.', "Done.",
                 [("get_weather", {"city": "Paris"})], id="pythonic_detector.py: text after"),
    pytest.param("pythonic", '[get_weather(city="Paris", extra={"a": [1, 2.5, True, None]},'
                 ' d={1: "x"})]', "", [("get_weather", {"city": "Paris", "extra": {
                     "a": [1, 2.5, True, None]}, "d": {"1": "x"}})],
                 id="pythonic_detector.py: nested literals, a number key"),
    pytest.param("pythonic", "[get_weather(city='日本')]", "",
                 [("get_weather", {"city": "日本"})], id="pythonic_detector.py: quotes, unicode"),
    pytest.param("pythonic", "[get_weather()]", "", [("get_weather", {})],
                 id="pythonic_detector.py: no arguments"),
    # SGLang's stream finds both lists; its whole-answer path finds neither
    pytest.param("pythonic", '[get_weather(city="Paris")][search(query="x")]', "",
                 [("get_weather", {"city": "Paris"}), ("search", {"query": "x"})],
                 id="pythonic_detector.py: two lists (as its stream reads them)"),
])
def test_tool_formats_parse_as_sglang(name: str, text: str, content: str,
                                      calls: list[Any]) -> None:
    assert run(name, text) == [(content, calls)] * 2


@pytest.mark.parametrize(("name", "text"), [
    ("hermes", "<tool_call>not valid json</tool_call>"),
    ("mistral", "[TOOL_CALLS]get_weather[ARGS]{bad"),
    ("deepseekv3", f"{TB}{TC}function{SEP}get_weather\n```json\n{{\"city\": }}\n```{TCE}{TE}"),
    ("deepseekv31", f"{TB}{TC}get_weather{SEP}{{\"city\"{TCE}{TE}"),
    # srt:TestKimiK2Detector.test_invalid_tool_call: no call, the text whole
    ("kimi_k2", f"{KB}invalid_tool:0{KA}{{\"city\": \"Paris\"}}{KCE}{KE}"),
    # pythonic: a positional argument, an item that is no call, a dotted name, a list left
    # open: SGLang's detector finds no call and shows the text (its stream holds an open
    # list back); an argument that is no literal (``-1``, a name, 1e999): SGLang drops
    # the block, seedproxy shows it, as with every format here
    ("pythonic", "[get_weather(1)]"), ("pythonic", '[get_weather(city="Paris"), 3]'),
    ("pythonic", "[a.b(c=1)]"), ("pythonic", '[get_weather(city="Paris"'),
    ("pythonic", "[get_weather(city=-1)]"), ("pythonic", "[get_weather(city=x)]"),
    ("pythonic", "[get_weather(city=1e999)]"),
    ("pythonic", "No calls here [1, 2] and [link](url)."),
])
def test_no_call_at_all_stays_content_as_generated(name: str, text: str) -> None:
    # srt/hermes test_malformed_json_returns_original_text: the text, whole.
    assert run(name, text) == [(text, [])] * 2


def test_mistral_call_ids_are_nine_alphanumerics_pinned() -> None:
    ids = [mistral_call_id("chatcmpl-abc:0", k) for k in range(3)]
    assert ids == ["IouJ9MMig", "7n2TnCpP3", "1en8WMT2H"]
    assert all(len(i) == 9 and i.isascii() and i.isalnum() for i in ids)
    assert TOOL_PARSERS["mistral"].call_id("chatcmpl-abc:0", 1) == ids[1]
    assert TOOL_PARSERS["hermes"].call_id("chatcmpl-abc:0", 1).startswith("call_")
    # Kimi K2's ids count the conversation's calls (SGLang's _process_tool_call_id).
    assert TOOL_PARSERS["kimi_k2"].call_id("chatcmpl-abc:0", 1, "get_weather", 2) == (
        "functions.get_weather:3")


def parts(name: str, text: str, opened: bool = False) -> list[tuple[str, str]]:
    """The joined (reasoning, content), whole and a character at a time."""
    out = []
    for pieces in ([text], list(text)):
        parser = REASONING_PARSERS[name](opened=opened)
        got = [p for piece in pieces for p in parser.feed(piece)] + parser.finish()
        out.append(("".join(t for k, t in got if k == "reasoning"),
                    "".join(t for k, t in got if k == "content")))
    return out


@pytest.mark.parametrize(("name", "text", "reasoning", "content"), [
    # DeepSeekR1Detector: force_reasoning, "(<think>)*(.*)</think>"
    ("deepseek-r1", "I need to think about this...</think>The answer is 42.",
     "I need to think about this...", "The answer is 42."),
    ("deepseek-r1", "<think>I need to think about this...</think>The answer is 42.",
     "I need to think about this...", "The answer is 42."),
    ("deepseek-r1", "Cut off while thinking", "Cut off while thinking", ""),
    # Qwen3Detector: not forced; <tool_call> ends the reasoning and stays content
    ("qwen3", "The answer is 42.", "", "The answer is 42."),
    ("qwen3", "<think>hm</think>The answer is 42.", "hm", "The answer is 42."),
    ("qwen3", "<think>need a tool\n<tool_call>{}</tool_call>", "need a tool",
     "<tool_call>{}</tool_call>"),
    ("qwen3-thinking", "plan</think>Done.", "plan", "Done."),
    ("glm45", "<think>x<tool_call>get_weather", "x", "<tool_call>get_weather"),
    ("kimi_k2", "<think>x<|tool_calls_section_begin|>y", "x", "<|tool_calls_section_begin|>y"),
    ("kimi", "◁think▷deep◁/think▷shallow", "deep", "shallow"),
    ("think", "plan</think>Done.", "", "plan</think>Done."),  # not forced, no tag: content
])
def test_reasoning_formats_parse_as_sglang(name: str, text: str, reasoning: str,
                                           content: str) -> None:
    assert parts(name, text) == [(reasoning, content)] * 2


def tool(name: str, **properties: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": properties}}}


GLM_TOOLS = [tool("get_weather", city={"type": "string"}, date={"type": "string"}),
             tool("todo_write", todos={"type": "array"}),
             tool("apply_diff", old_string={"type": "string"}, new_string={"type": "string"}),
             tool("typed", n={"type": "number"}, flag={"type": "boolean"},
                  s={"type": "string"}, opt={"anyOf": [{"type": "integer"}, {"type": "null"}]},
                  e={"enum": ["a", "b"]})]


def glm(name: str, *pairs: tuple[str, str], sep: str = "\n") -> str:
    body = "".join(f"<arg_key>{k}</arg_key>{sep}<arg_value>{v}</arg_value>{sep}" for k, v in pairs)
    return f"<tool_call>{name}{sep}{body}</tool_call>"


@pytest.mark.parametrize(("text", "content", "calls"), [
    pytest.param(glm("get_weather", ("city", "Beijing"), ("date", "2024-06-27"))
                 + glm("get_weather", ("city", "Shanghai"), ("date", "2024-06-28")), "",
                 [("get_weather", {"city": "Beijing", "date": "2024-06-27"}),
                  ("get_weather", {"city": "Shanghai", "date": "2024-06-28"})],
                 id="glm4_moe:test_multiple_tool_calls"),
    pytest.param(glm("get_weather", ("city", "北京"), sep="\\n"), "",
                 [("get_weather", {"city": "北京"})],
                 id="glm4_moe_detector.py:docstring, literal \\n separators"),
    pytest.param(glm("apply_diff", ("old_string", "    indented code"),
                     ("new_string", "        also indented")), "",
                 [("apply_diff", {"old_string": "    indented code",
                                  "new_string": "        also indented"})],
                 id="glm4_moe:test_whitespace_preserved_in_arg_values"),
    pytest.param(glm("get_weather", ("city", '"\\C|\\."'), ("date", "2024-06-27")), "",
                 [("get_weather", {"city": r"\C|\.", "date": "2024-06-27"})],
                 id="glm4_moe:test_quoted_string_invalid_python_escape_no_warning"),
    pytest.param(glm("todo_write", ("todos", '[{"id": "1", "task": "C:\\\\Users"}]')), "",
                 [("todo_write", {"todos": [{"id": "1", "task": "C:\\Users"}]})],
                 id="glm4_moe:test_array_argument_with_escaped_json"),
    pytest.param(glm("todo_write", ("todos", '[{\\"id\\": \\"1\\"}]')), "",
                 [("todo_write", {"todos": [{"id": "1"}]})],
                 id="glm4_moe:test_array_argument_with_escaped_json (escaped quotes)"),
    pytest.param("Let me check." + glm("get_weather", ("city", "Paris")) + " Done.",
                 "Let me check. Done.", [("get_weather", {"city": "Paris"})],
                 id="text before and after the call is content"),
    pytest.param(glm("typed", ("n", '"5"'), ("flag", "true"), ("s", "42"), ("opt", "7"),
                     ("e", "a"), ("free", "[1, 2]"), ("word", "text")), "",
                 [("typed", {"n": 5, "flag": True, "s": "42", "opt": 7, "e": "a",
                             "free": [1, 2], "word": "text"})],
                 id="glm4_moe_detector.py:_parse_argument_pairs, values typed by schema"),
    pytest.param(glm("get_weather", ("city", "Paris")) + glm("nope", ("city", "x")),
                 glm("nope", ("city", "x")), [("get_weather", {"city": "Paris"})],
                 id="glm4_moe:test_invalid_tool_call (an unknown tool is no call)"),
])
def test_glm45_calls_parse_as_sglang(text: str, content: str, calls: list[Any]) -> None:
    assert run("glm45", text, GLM_TOOLS) == [(content, calls)] * 2


def test_glm45_without_a_known_tool_is_content_as_generated() -> None:
    text = glm("invalid_func", ("city", "Beijing"))  # glm4_moe:test_invalid_tool_call
    assert run("glm45", text, GLM_TOOLS) == [(text, [])] * 2
    assert run("glm45", "<tool_call>get_weather</tool_call>", GLM_TOOLS) == [
        ("<tool_call>get_weather</tool_call>", [])] * 2
    # A Python literal that JSON cannot hold (a set) fails SGLang's json.dumps: no call.
    unset = glm("typed", ("free", "{1, 2}"))
    assert run("glm45", unset, GLM_TOOLS) == [(unset, [])] * 2


@pytest.mark.parametrize(("raw", "kind", "value"), [
    # glm4_moe:test_parse_arguments_preserves_underscore_in_string_args
    ("123_456", "string", "123_456"), ("1_000.5", "string", "1_000.5"), ("123_456", None, 123456),
    ("true", "string", "True"), ("{\"a\": 1}", "string", '{"a": 1}'), ("'x'", "string", "x"),
    ("2.5", "number", 2.5), ('"3"', "number", 3), ("x y", None, "x y"),
])
def test_glm45_argument_values_as_sglang_types_them(raw: str, kind: str | None,
                                                    value: Any) -> None:
    got = argument_value(raw, kind)
    assert (got, type(got)) == (value, type(value))



READ = tool("ReadFile", path={"type": "string"})
KIMI_TOOLS = [READ, tool("get_weather", city={"type": "string"}, unit={"type": "string"})]


def kimi(*calls: tuple[str, dict[str, Any]], before: str = "") -> str:
    """``before``, then one section of calls (id, arguments)."""
    body = "".join(f"{KC}{ident}{KA}{json.dumps(args)}{KCE}" for ident, args in calls)
    return f"{before}{KB}{body}{KE}"


@pytest.mark.parametrize(("text", "tools", "content", "calls"), [
    pytest.param(kimi(("functions.ReadFile:5", {"path": "/a.py"}),
                      ("functions.get_weather:6", {"city": "Tokyo"})), KIMI_TOOLS,
                 "", [("ReadFile", {"path": "/a.py"}), ("get_weather", {"city": "Tokyo"})],
                 id="kimik2:test_non_streaming_tool_index_is_local"),
    pytest.param(kimi(("functions.mcp__portal__search-documents:0", {"path": "/d"})),
                 [tool("mcp__portal__search-documents", path={"type": "string"})], "",
                 [("mcp__portal__search-documents", {"path": "/d"})],
                 id="kimik2:test_hyphenated_name_non_streaming"),
    pytest.param(kimi(("functions.get_weather:0", {"city": "London"}), before="Prefix text:")
                 + kimi(("functions.get_weather:1", {"city": "Delhi"}),
                        before=" Now calling next: "), KIMI_TOOLS,
                 "Prefix text: Now calling next:",
                 [("get_weather", {"city": "London"}), ("get_weather", {"city": "Delhi"})],
                 id="kimik2:test_e2e_normal_text_between_two_tool_calls"),
    pytest.param(kimi(("weird@id", {"city": "London"}), before="normal text before")
                 + kimi(("functions.get_weather:0", {"city": "Delhi"})),
                 KIMI_TOOLS, "normal text before", [("get_weather", {"city": "Delhi"})],
                 id="kimik2:test_e2e_unparsable_tool_id_does_not_wedge_stream"),
    pytest.param(kimi(("3", {"path": "/x"})), [READ], "", [("ReadFile", {"path": "/x"})],
                 id="kimik2_detector.py:_infer_tool_name, a bare counter and one tool"),
    pytest.param(kimi(("3", {"city": "Paris"}), ("4", {"path": "/x"})), KIMI_TOOLS, "",
                 [("get_weather", {"city": "Paris"}), ("ReadFile", {"path": "/x"})],
                 id="kimik2_detector.py:_infer_tool_name, keys matched against the schemas"),
    pytest.param(kimi(("3", {"zip": 1, "z": 2}), ("get_weather", {"city": "P"}),
                      ("functions.get_weather:4", {"city": "Oslo"})),
                 KIMI_TOOLS, "", [("get_weather", {"city": "Oslo"})],
                 id="kimik2_detector.py:_parse_tool_call_id, no tool named: skipped"),
])
def test_kimi_k2_ids_resolve_as_sglang(text: str, tools: list[dict[str, Any]], content: str,
                                       calls: list[Any]) -> None:
    assert run("kimi_k2", text, tools) == [(content, calls)] * 2


def test_kimi_k2_bare_counter_without_tools_or_properties_is_no_call() -> None:
    text = kimi(("0", {"city": "Paris"}))
    assert run("kimi_k2", text, []) == [(text, [])] * 2
    bare = [{"type": "function", "function": {"name": f"t{k}"}} for k in range(2)]
    assert run("kimi_k2", text, bare) == [(text, [])] * 2


@pytest.mark.parametrize("text", [
    "[f(a=" + "(" * 5000 + ")" * 5000 + ")]",  # past Python's parser nesting limit
    "[f(a=" + "[" * 5000 + "]" * 5000 + ")]",  # past the bracket depth read
    "[f(a={" + '"k": {' * 3000 + "1" + "}" * 3001 + ")]",
    "[f(a=__import__('os').system('true'))]",  # never evaluated: not a literal
    "[f(a=b'bytes'), g(a=...)]",
])
def test_pythonic_hostile_lists_are_content_and_never_run(text: str) -> None:
    """The model's text is parsed by Python's parser within bounds, never evaluated: a
    list too deep, too large or holding no literal is content as generated."""
    assert run("pythonic", text) == [(text, [])] * 2


def test_a_pythonic_list_over_the_size_read_is_content() -> None:
    text = "[f(a='" + "x" * (1 << 20) + "')]"
    parser = TOOL_PARSERS["pythonic"]()
    assert parser.feed(text) == "" and parser.finish() == (text, [])
    small = TOOL_PARSERS["pythonic"]()
    assert small.feed("[f(a='x')]") == "" and small.finish()[1] != []


def test_a_pythonic_invalid_escape_is_kept_even_where_warnings_are_errors() -> None:
    """An invalid escape keeps its backslash and only warns; under ``-W error`` Python's
    parser would make it a syntax error and the call content. SGLang's _run_ast_quiet
    ignores that warning, and so does the parser."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run("pythonic", "[search(query='\\d+ items')]")
    assert got == [("", [("search", {"query": "\\d+ items"})])] * 2
