"""The YAML reader refuses what YAML would silently accept or expand without bound (issue #17), with a location."""

import pytest

from simulator import load_scenario, simulate
from simulator.entries.simulate import SUMMARY_KEYS
from simulator.errors import UserError
from simulator.limits import MAX_YAML_NODES
from simulator.yamlio import MAX_YAML_DEPTH, parse_yaml_text


@pytest.mark.parametrize(("text", "message"), [
    ("a: 1\nb:\n  c: 2\n  c: 3\n", "f.yaml:4: b.c: duplicate key 'c': first on line 3, again on line 4"),
    ("a: {x: 1, x: 2}\n", "f.yaml:1: a.x: duplicate key 'x': first on line 1, again on line 1"),
    ("? [a, b]\n: 1\n", "f.yaml:1: a key must be a plain name, not a list or a mapping"),
    ("a: &x\n  b: *x\n", "f.yaml:1: an alias refers to a node that contains it (recursive YAML)"),
    ("a: " + "[" * 100 + "]" * 100 + "\n", f"nested more than {MAX_YAML_DEPTH} levels deep"),
    ("a: !!python/object:os.system x\n", "f.yaml:1: malformed YAML: could not determine a constructor"),
    ("a:\n  - 1.0\n  - -.Inf\n", "f.yaml:3: a.1: -.Inf is not a finite number"),
    ("a: .NaN\n", "f.yaml:1: a: .NaN is not a finite number"),
    ("a: 1.0e+400\n", "f.yaml:1: a: 1.0e+400 is not a finite number"),
])
def test_refused_documents(text, message):
    with pytest.raises(UserError) as exc:
        parse_yaml_text(text, "f.yaml")
    assert message in str(exc.value)


def test_accepted_documents_keep_their_meaning():
    located = parse_yaml_text("base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\nlist: [*b, *b]\n'1': a\n1: b\n",
                              "f.yaml")
    assert located.data == {"base": {"x": 1}, "other": {"x": 1, "y": 2}, "list": [{"x": 1}, {"x": 1}],
                            "1": "a", 1: "b"}
    assert located.line_of("other.y") == 4 and located.line_of("1") == 7


def test_node_limit_counts_aliases_as_expanded():
    wide = "a: &a [" + ", ".join(["1"] * 999) + "]\n"
    parse_yaml_text(wide + "b: [" + ", ".join(["*a"] * 98) + "]\n", "f.yaml")  # 99 x 1,000 values: accepted
    with pytest.raises(UserError, match=f"more than {MAX_YAML_NODES:,} values with every alias expanded"):
        parse_yaml_text(wide + "b: [" + ", ".join(["*a"] * 101) + "]\n", "f.yaml")


def test_api_dicts_are_checked_for_finite_numbers():
    with pytest.raises(UserError, match="training.seq_len: inf is not a finite number"):
        load_scenario({"system": {"profile": "dgx_h100"}, "model": {"preset": "llama3-8b"},
                       "training": {"seq_len": float("inf")}})


def test_summary_keys_are_the_summarys():
    result = simulate(load_scenario("scenarios/quickstart.yaml"))
    assert tuple(result.summary()) == SUMMARY_KEYS
