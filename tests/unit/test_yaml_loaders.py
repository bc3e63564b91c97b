"""The two YAML loaders of simulator/yamlio.py read alike: libyaml's ``CSafeLoader`` (used when PyYAML was built
with it) and the pure-Python ``SafeLoader`` (the fallback, forced here) give the same data and key lines on every
shipped file and on mutated copies of them, and a malformed document exits 2 at the same line with PyYAML's words.
Shipped implementation profiles are built one base chain at a time (simulator/implementation/profiles.py)."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import yamlio
from simulator.cli import main
from simulator.errors import UserError
from simulator.implementation import profiles
from simulator.yamlio import MAX_YAML_DEPTH, fast_safe_load, parse_yaml_text, safe_loader_of

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(path for folder in ("scenarios", "hardware_profiles", "simulator")
                 for path in (ROOT / folder).rglob("*.yaml"))
TEXTS = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in SHIPPED}
LIBYAML = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml: one loader only")


def outcome(text: str, loader: type) -> tuple:
    """What ``parse_yaml_text`` gives with ``loader`` as the module's loader: the data and lines, or the message."""
    saved, yamlio.SAFE_LOADER = yamlio.SAFE_LOADER, loader
    try:
        located = parse_yaml_text(text, "f.yaml")
        return repr(located.data), located.lines
    except UserError as exc:
        return (str(exc),)
    finally:
        yamlio.SAFE_LOADER = saved


def test_libyaml_is_chosen_when_pyyaml_has_it():
    assert yamlio.SAFE_LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)
    built = SimpleNamespace(__with_libyaml__=True, CSafeLoader="C", SafeLoader="Python")
    assert safe_loader_of(built) == "C"
    assert safe_loader_of(SimpleNamespace(__with_libyaml__=False, CSafeLoader="C", SafeLoader="Python")) == "Python"
    assert safe_loader_of(SimpleNamespace(SafeLoader="Python")) == "Python"      # an old PyYAML without the flag


@LIBYAML
def test_every_shipped_file_reads_alike():
    assert len(TEXTS) > 100
    assert all(map(yamlio._reads_alike, TEXTS.values()))     # every one is read by libyaml
    for name, text in TEXTS.items():
        fast, pure = outcome(text, yaml.CSafeLoader), outcome(text, yaml.SafeLoader)
        assert len(fast) == 2 and fast == pure, name
        assert fast_safe_load(text) == yaml.safe_load(text), name


MALFORMED = [
    # libyaml says "mapping values are not allowed in this context", "did not find expected ',' or ']'", "found
    # undefined alias": the pure-Python loader reads it again and its words are kept
    ("a: 1\n b: 2\n", "f.yaml:2: malformed YAML: mapping values are not allowed here"),
    ("a: [1, 2\n", "f.yaml:2: malformed YAML: expected ',' or ']', but got '<stream end>'"),
    ("a: 1\nb: *nope\n", "f.yaml:2: malformed YAML: found undefined alias 'nope'"),
    # libyaml would accept these (a tab, a '?' in a flow scalar): left to the pure-Python loader
    ("a:\n  b: 1\n\tc: 2\n", "f.yaml:3: malformed YAML: found character '\\t' that cannot start any token"),
    ("a: {b: x?y}\n", "f.yaml:1: malformed YAML: expected ',' or '}', but got '?'"),
    ("a: 1\nb\tc: 2\n", "f.yaml:2: malformed YAML: found character '\\t' that cannot start any token"),
    # libyaml refuses more than 1,000 levels itself
    ("a: " + "[" * 1001 + "]" * 1001 + "\n", f"f.yaml: malformed YAML: nested more than {MAX_YAML_DEPTH} levels deep"),
    # were a bare ValueError / KeyError / ReaderError (a traceback) with either loader
    ("a: 1\nb: !!int x\n", "f.yaml:2: malformed YAML: 'x' is not a valid !!int"),
    ("a: [1, !!bool maybe]\n", "f.yaml:1: malformed YAML: 'maybe' is not a valid !!bool"),
    ("a: 1\n\nb: \x00\n",
     "f.yaml:3: malformed YAML: unacceptable character #x0000: special characters are not allowed"),
    # the checks on nodes, before anything is built
    ("a: 1\na: 2\n",
     "f.yaml:2: a: duplicate key 'a': first on line 1, again on line 2 (YAML would silently keep the last; keep one)"),
    ("a:\n  - .inf\n", "f.yaml:2: a.0: .inf is not a finite number"),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_malformed_documents_fail_alike(text, message):
    assert outcome(text, yaml.SafeLoader) == (message,)
    if yaml.__with_libyaml__:
        assert outcome(text, yaml.CSafeLoader) == (message,)


def test_a_byte_order_mark_inside_reads_as_pyyaml_reads_it():
    text = "a: [1,\n\ufeff  2]\n"            # libyaml: [1, 2]; PyYAML: the mark starts a plain scalar
    assert yaml.load(text, Loader=yaml.SafeLoader) == {"a": [1, "\ufeff  2"]}
    assert parse_yaml_text(text).data == fast_safe_load(text) == {"a": [1, "\ufeff  2"]}


def test_malformed_scenario_exits_2_at_its_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text((ROOT / "scenarios" / "korthikanti_22b.yaml").read_text().replace("nodes: 1", "nodes: !!int one"))
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if "!!int one" in s)
    assert main(["run", str(path)]) == 2
    assert f"{path}:{line}: malformed YAML: 'one' is not a valid !!int" in capsys.readouterr().err


#: what a mutation inserts: YAML's indicators, breaks, tabs, a NUL, a BOM, a line separator
PIECES = st.sampled_from([":", "-", "[", "]", "{", "}", ",", "#", "&a ", "*a", "!", "|", ">", "'", '"', "?", "%", "@",
                          " ", "  ", "\n", "\n  ", "- ", ": ", "---\n", "\t", "\x00", "\ufeff", "\u2028", "\r\n",
                          "!!int ", "<<: ", ".inf", "0x1", "yes"])
MUTATION = st.tuples(st.floats(0, 1), st.integers(0, 3), PIECES)


@LIBYAML
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(TEXTS)), mutations=st.lists(MUTATION, min_size=1, max_size=3))
def test_mutated_shipped_files_read_alike(name, mutations):
    text = TEXTS[name]
    for where, cut, piece in mutations:
        at = int(where * len(text))
        text = text[:at] + piece + text[at + cut:]
    assert outcome(text, yaml.CSafeLoader) == outcome(text, yaml.SafeLoader)


@pytest.fixture
def fresh_profiles():
    """The profile caches emptied before and after (the next user rebuilds the same profiles)."""
    caches = (profiles.shipped_names, profiles._raw, profiles._shipped, profiles.shipped_profiles)
    for cache in caches:
        cache.cache_clear()
    yield
    for cache in caches:
        cache.cache_clear()


def test_a_profile_reads_only_its_base_chain(fresh_profiles, monkeypatch):
    read = []
    real = profiles._read
    monkeypatch.setattr(profiles, "_read", lambda path: (read.append(Path(path).name), real(path))[1])
    chain = profiles.profile_named("megatron_core_te_r0_8")
    assert read == ["megatron_core_te_r0_8.yaml", "megatron_core_te.yaml", "megatron.yaml"]
    assert profiles.profile_named("megatron") is profiles.profile_named("megatron") and len(read) == 3
    everything = profiles.shipped_profiles()
    assert len(read) == len(everything) == len(list(profiles.FRAMEWORKS_DIR.glob("*.yaml")))
    assert everything["megatron_core_te_r0_8"] is chain


def test_shipped_profiles_keeps_its_cross_checks(fresh_profiles, monkeypatch, tmp_path):
    monkeypatch.setattr(profiles, "FRAMEWORKS_DIR", tmp_path)
    (tmp_path / "good.yaml").write_text("name: good\nfamily: pytorch\n")
    (tmp_path / "renamed.yaml").write_text("name: other\n")
    assert profiles.profile_named("good").family == "pytorch"       # a broken neighbour is not read
    with pytest.raises(UserError, match="renamed.yaml: name: profile name 'other' differs from its file name"):
        profiles.shipped_profiles()
    with pytest.raises(UserError, match=r"unknown framework 'nope' \(shipped implementation profiles: good, renamed;"):
        profiles.profile_named("nope")
    (tmp_path / "renamed.yaml").write_text("name: renamed\nbase: loop\n")
    (tmp_path / "loop.yaml").write_text("name: loop\nbase: renamed\n")
    for cache in (profiles.shipped_names, profiles._raw, profiles.shipped_profiles):
        cache.cache_clear()
    with pytest.raises(UserError, match=r"loop.yaml: base: base 'renamed' is not a shipped profile \(or forms a cycle"):
        profiles.profile_named("renamed")
    with pytest.raises(UserError, match=r"renamed.yaml: base: base 'loop' is not a shipped profile \(or forms a cycle"):
        profiles.shipped_profiles()
