"""The language of each structural-tag ``format`` as the engine writes it for llguidance,
string by string: what xgrammar 0.2.9 (SGLang's default grammar backend) accepts and
refuses for the same format (its verdicts, taken once with ``GrammarMatcher``, are the
data below). Checked with llguidance's own matcher over SmolLM2's tokenizer, the one
the engine's grammars are compiled for."""

from __future__ import annotations

import json
from typing import Any

import pytest

from seedproxy.engine.struct_format import read_format
from seedproxy.engine.struct_lark import format_grammar

pytestmark = pytest.mark.engine

T = {"type": "tag", "begin": "<f=x>", "content": {"type": "regex", "pattern": "[0-9]+"},
     "end": "</f>"}
T2 = {"type": "tag", "begin": "<g=y>", "content": {"type": "const_string", "value": "k"},
      "end": "</g>"}
TJ = {"type": "tag", "begin": "<f=j>", "content": {"type": "json_schema", "json_schema": {
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
    "additionalProperties": False}}, "end": "</f>"}
A = {"type": "any_text"}
C = {"type": "const_string", "value": "c"}
J = {"type": "json_schema", "json_schema": {"type": "integer"}}
D = {"type": "regex", "pattern": "[0-9]"}

CASES: list[tuple[dict[str, Any], list[str], list[str]]] = [
    ({"type":"const_string","value":"The capital of France is Berlin."},
     ['The capital of France is Berlin.'], ['The capital', '']),
    ({"type":"regex","pattern":"[0-9]{2}-\\w+"},
     ['12-ab_'], ['1-a', '12-']),
    ({"type":"sequence","elements":[A,C]},
     ['c', 'xc', 'xcyc'], ['x']),
    ({"type":"sequence","elements":[C,J]},
     ['c12', 'c-3'], ['c']),
    ({"type":"sequence","elements":[J,A]},
     ['12', '12abc'], ['abc']),
    ({"type":"tag","begin":"<a>","content":A,"end":"</a>"},
     ['<a>x</a>', '<a></a>'], ['<a>x</a>y</a>', '<a>x']),
    ({"type":"tag","begin":"<a>","content":{"type":"any_text","excludes":["zz"]},"end":["</a>","</b>"]},
     ['<a>x</b>', '<a>z</a>'], ['<a>zz</a>']),
    ({"type":"tag","begin":"<a>","content":{"type":"sequence","elements":[C,A]},"end":"</a>"},
     ['<a>c</a>', '<a>cxx</a>'], ['<a>x</a>']),
    ({"type":"or","elements":[C,J]},
     ['c', '5'], ['c5']),
    ({"type":"triggered_tags","triggers":["<f"],"tags":[T]},
     ['', 'hello', 'hi <f=x>12</f> bye', '<f=x>1</f><f=x>2</f>'],
     ['hi <f=y>', 'a<f', '<f=x>1</f>x<f']),
    ({"type":"triggered_tags","triggers":["<f","<g"],"tags":[T,T2],"at_least_one":True},
     ['<f=x>1</f>', '<g=y>k</g>tail<f=x>3</f>end'], ['x<f=x>1</f>', '']),
    ({"type":"triggered_tags","triggers":["<f"],"tags":[T],"stop_after_first":True},
     ['abc', 'abc<f=x>1</f>'], ['abc<f=x>1</f>more', '<f=x>1</f><f=x>1</f>']),
    ({"type":"triggered_tags","triggers":["<f"],"tags":[T],"stop_after_first":True,"at_least_one":True},
     ['<f=x>1</f>'], ['a<f=x>1</f>', '<f=x>1</f>a']),
    ({"type":"triggered_tags","triggers":["<f"],"tags":[T, TJ]},
     ['t<f=j>{"a": 1}</f>', '<f=x>7</f>'], ['t<f=j>{"a": "x"}</f>']),
    ({"type":"triggered_tags","triggers":["<f"],"tags":[T],"excludes":["zz"]},
     ['aa'], ['azz', '<f=x>1</f>zz']),
    ({"type":"tag","begin":"<a>","content":{"type":"triggered_tags","triggers":["<f"],"tags":[T]},"end":"</a>"},
     ['<a>hi<f=x>1</f>ok</a>', '<a></a>'], ['<a>x</a>y</a>', '<a>hi<f=x>1</f>']),
    ({"type":"sequence","elements":[{"type":"triggered_tags","triggers":["<f"],"tags":[T]},C]},
     ['c', 'xc', '<f=x>1</f>c'], ['x']),
    ({"type":"tags_with_separator","separator":",","tags":[T,T2]},
     ['', '<f=x>1</f>', '<f=x>1</f>,<g=y>k</g>'], ['<f=x>1</f><g=y>k</g>']),
    ({"type":"tags_with_separator","separator":",","tags":[T,T2],"at_least_one":True},
     ['<f=x>1</f>'], ['']),
    ({"type":"tags_with_separator","separator":",","tags":[T,T2],"stop_after_first":True},
     ['', '<f=x>1</f>'], ['<f=x>1</f>,<g=y>k</g>']),
    ({"type":"tags_with_separator","separator":"","tags":[TJ]},
     ['<f=j>{"a":1}</f><f=j>{"a":2}</f>', ''], []),
    ({"type":"grammar","grammar":'root ::= "a" x\nx ::= "b" | "c"'},
     ['ab', 'ac'], ['a']),
    ({"type":"sequence","elements":[
        {"type":"grammar","grammar":'root ::= "a" x\nx ::= "b" | "c"'}, D]},
     ['ab1'], ['ac', 'a1']),
    ({"type":"tag","begin":"<a>","content":{"type":"grammar","grammar":'root ::= "a"+'},
      "end":"</a>"},
     ['<a>aaa</a>'], ['<a></a>']),
    ({"type":"json_schema","json_schema":True},
     ['{"x": [1]}'], ['nope']),
    ({"type":"tag","begin":"","content":C,"end":""},
     ['c'], ['']),
    ({"type":"const_string","value":"é😀\"\\\n/"},
     ['é😀"\\\n/'], []),
    ({"type":"regex","pattern":"a/b"},
     ['a/b'], []),
    ({"type":"optional","content":C},
     ['', 'c'], ['cc']),
    ({"type":"plus","content":D},
     ['1', '123'], ['']),
    ({"type":"star","content":{"type":"sequence","elements":[D,{"type":"const_string","value":","}]}},
     ['', '1,', '1,2,'], ['1,2']),
    ({"type":"repeat","min":2,"max":3,"content":D},
     ['12', '123'], ['1', '1234']),
    ({"type":"repeat","min":2,"max":-1,"content":D},
     ['12', '12345'], ['1']),
    ({"type":"sequence","elements":[{"type":"repeat","min":1,"max":2,"content":TJ},C]},
     ['<f=j>{"a":1}</f>c'], ['c']),
    ({"type":"tag","begin":"<a>","content":{"type":"star","content":A},"end":"</a>"},
     ['<a>x</a>', '<a>x</a>y</a>'], []),
    ({"type":"triggered_tags","triggers":["<f","<g"],"tags":[T,T2]},
     ['a<g=y>k</g>b', 'x<f=x>1</f><g=y>k</g>', '<<f=x>1</f>', 'f=x>', '<'],
     ['a<gz', '<g<f=x>1</f>', '<f<g=y>k</g>']),
    ({"type":"triggered_tags","triggers":["<f"],"tags":[T],"excludes":["zz"]},
     ['a<f=x>1</f>z', 'z<f=x>1</f>z'], ['azz<f=x>1</f>', 'a<f=x>1</f>zz']),
    ({"type":"tag","begin":"<a>","content":{"type":"triggered_tags","triggers":["<f"],"tags":[T],"stop_after_first":True},"end":"</a>"},
     ['<a>x</a>', '<a>x<f=x>1</f></a>'], ['<a>x<f=x>1</f>y</a>', '<a>x</a', '<a>x</a></a>']),
    ({"type":"sequence","elements":[{"type":"triggered_tags","triggers":["<f"],"tags":[T],"at_least_one":True},{"type":"const_string","value":"END"}]},
     ['<f=x>1</f>END', '<f=x>1</f>xEND', '<f=x>1</f>x<f=x>2</f>END'], ['END']),
]


@pytest.fixture(scope="module")
def ll() -> Any:
    from llguidance.hf import from_tokenizer

    from seedproxy.engine.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    return from_tokenizer(tok, n_vocab=len(tok), eos_token=[tok.eos_token_id])


def accepts(ll: Any, grammar: str, text: str) -> bool:
    from llguidance import LLMatcher

    matcher = LLMatcher(ll, grammar, log_level=0)
    return all(matcher.consume_token(t) for t in ll.tokenize_str(text)) and (
        matcher.is_accepting())


@pytest.mark.parametrize(("fmt", "accepted", "refused"), CASES,
                         ids=[json.dumps(c[0])[:60] for c in CASES])
def test_the_language_is_xgrammars(ll: Any, fmt: dict[str, Any], accepted: list[str],
                                   refused: list[str]) -> None:
    grammar = format_grammar(read_format({"type": "structural_tag", "format": fmt}))
    from llguidance import LLMatcher

    assert not LLMatcher.validate_grammar(grammar, ll)
    assert [s for s in accepted if not accepts(ll, grammar, s)] == []
    assert [s for s in refused if accepts(ll, grammar, s)] == []
