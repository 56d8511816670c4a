"""Matrix files: expansion, ids, tags, known failures, the `python` axis (expansion, ids, rules on it), and every
kind of bad input."""
import datetime as dt
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from matrix_helpers import INCLUDE_312, VALID, load_text

from harness import matrix
from harness.errors import InputError

ROOT = Path(__file__).resolve().parents[4]


def test_expansion_is_the_product_minus_excludes_plus_includes(resources):
    m = matrix.load(resources / "matrices" / "small.toml")
    ids = [c.id for c in m.cells]
    assert ids == [
        "fsdp-text-tf5.3.0-torch2.13.0-td0.10.0",
        "fsdp-text-tf5.3.0-torch2.13.0-td0.15.3",
        "fsdp-text-tf5.10.0-torch2.13.0-td0.10.0",
        "fsdp-text-tf5.10.0-torch2.13.0-td0.15.3",
        "fsdp-text-tf5.9.0-torch2.13.0-td0.15.3",
        "megatron-text-tf5.23.0-torch2.13.0-td0.10.0-mcore0.16.1",
        "megatron-text-tf5.23.0-torch2.13.0-td0.15.3-mcore0.16.1",
    ]
    megatron = m.cells[-1]
    assert megatron.requirements == ["torch==2.13.0", "transformers==5.23.0", "tensordict==0.15.3",
                                     "megatron-core==0.16.1"]


def test_expansion_is_deterministic_and_ids_are_stable(resources):
    first = [(c.id, c.tags) for c in matrix.load(resources / "matrices" / "small.toml").cells]
    second = [(c.id, c.tags) for c in matrix.load(resources / "matrices" / "small.toml").cells]
    assert first == second
    assert len({c for c, _ in first}) == len(first)


def test_tags_compare_versions_not_strings(resources):
    m = matrix.load(resources / "matrices" / "small.toml")
    tagged = {c.id for c in m.cells if "new" in c.tags}
    # 5.10.0 >= 5.9 as a version (as strings it would not be)
    assert "fsdp-text-tf5.10.0-torch2.13.0-td0.15.3" in tagged
    assert "fsdp-text-tf5.3.0-torch2.13.0-td0.15.3" not in tagged
    assert all({"small", "fsdp", "text", "cpu"} <= set(c.tags) for c in m.cells if c.axes["backend"] == "fsdp")


def test_known_failures_attach_to_matching_cells_only(resources):
    m = matrix.load(resources / "matrices" / "small.toml")
    for cell in m.cells:
        expected = cell.axes["tensordict"] == "0.10.0"
        assert bool(cell.known_failures) == expected, cell.id
    known = m.cells[0].known_failures[0]
    assert known.expires == dt.date(2099, 1, 1) and known.link.startswith("https://")


def test_select_by_id_and_tag(resources):
    m = matrix.load(resources / "matrices" / "small.toml")
    assert [c.id for c in m.select(tags=["megatron"])][0].startswith("megatron-")
    assert len(m.select(ids=["fsdp-text-tf5.3.0-torch2.13.0-td0.10.0"])) == 1
    with pytest.raises(InputError, match="no cell 'nope'"):
        m.select(ids=["nope"])
    with pytest.raises(InputError, match="no cell has tag 'nope'"):
        m.select(tags=["nope"])


def test_the_shipped_matrices_load():
    from pathlib import Path

    root = Path(__file__).resolve().parents[4] / "matrices"
    loaded = {p.stem: matrix.load(p) for p in root.glob("*.toml")}
    assert {"cpu", "cuda", "npu"} <= set(loaded)
    tf = sorted({c.axes["transformers"] for c in loaded["cpu"].cells})
    assert {"5.1.0", "5.2.0", "5.3.0", "5.5.3", "5.9.0"} <= set(tf)
    # (and verl[cpu]'s row: the newest tensordict inside verl's range, resolved when the run starts)
    assert {c.axes["tensordict"] for c in loaded["cpu"].cells} == {"0.10.0", "0.15.3", "newest"}
    # Only the air-gapped box's matrix is offline: the nightly never dispatches its cells to runners.
    assert [name for name, m in loaded.items() if m.offline] == ["gpu-evidence"]
    assert loaded["gpu-evidence"].benchmarks == ("grpo-vs-trl",)


CHAT = VALID.replace('["stack-smoke"]', '["stack-smoke", "vllm-chat-parity"]')
STANDING = ('[[standing]]\ncheck = "vllm-chat-parity"\nverdict = "tool-calls-malformed"\n'
            'ours = "the trainer\'s parser"\nupstream = "vLLM\'s parser"\n')


def test_a_standing_rule_names_the_upstream_component_a_verdict_compares_against(tmp_path):
    m = load_text(tmp_path, CHAT + STANDING + 'when = { transformers = "==5.3.0" }\n')
    (rule,) = m.standing
    assert (rule.ours, rule.upstream) == ("the trainer's parser", "vLLM's parser")
    assert rule.covers("vllm-chat-parity", "tool-calls-malformed", m.cells[0].axes)
    assert not rule.covers("vllm-chat-parity", "tool-calls", m.cells[0].axes)
    assert not rule.covers("vllm-chat-parity", "tool-calls-malformed", {**m.cells[0].axes, "transformers": "5.9.0"})


BAD = [
    ("not toml", "[matrix\nname=", "not valid TOML"),
    ("unknown top key", VALID + "\n[colour]\nx = 1\n", "colour: unknown key"),
    ("unknown axis", VALID.replace("torch = [", "trochx = [\"1.0\"]\ntorch = ["), "axes.trochx: unknown key"),
    ("bad version", VALID.replace('"5.3.0"', '"5.3.x"'), "'5.3.x' is not a valid version"),
    ("shell in version", VALID.replace('"5.3.0"', '"5.3.0; rm -rf ~"'), "is not a valid version"),
    ("bad choice", VALID.replace('["text"]', '["huge"]'), "'huge' is not one of text, vl, moe"),
    ("unknown check", VALID.replace('["stack-smoke"]', '["stack-smoke", "vibes"]'), "unknown check 'vibes'"),
    ("missing device", VALID.replace('device = ["cpu"]\n', ""), "axes.device: missing"),
    ("unknown matrix key", VALID.replace('name = "t"', 'name = "t"\ncolour = 1'), "matrix.colour: unknown key"),
    ("exclude matches nothing", VALID + '[[exclude]]\ntransformers = "<5"\n', "exclude[0]: matches no cell"),
    ("exclude everything", VALID + '[[exclude]]\ntransformers = ">=5"\n', "every cell is excluded"),
    ("bad specifier", VALID + '[[exclude]]\ntransformers = ">=5..2"\n', "invalid version specifier"),
    ("tag matches nothing", VALID + '[[tags]]\ntag = "x"\nwhen = { transformers = ">6" }\n', "matches no cell"),
    ("bad image", VALID.replace('device = ["cpu"]', 'device = ["cpu"]\nimage = ["$(reboot)"]'),
     "is not a container image reference"),
    ("known failure without expiry",
     VALID + '[[known_failures]]\ncheck = "stack-smoke"\nwhen = { transformers = "==5.3.0" }\nreason = "r"\n'
             'link = "https://x.test/1"\n', "known_failures[0].expires: missing"),
    ("known failure with string date",
     VALID + '[[known_failures]]\ncheck = "stack-smoke"\nwhen = { transformers = "==5.3.0" }\nreason = "r"\n'
             'link = "https://x.test/1"\nexpires = "2027-01-01"\n', "expected a TOML date"),
    ("python is an option", VALID.replace('name = "t"', 'name = "t"\npython = "--help"'), "matrix.python"),
    ("python is a number", VALID.replace('name = "t"', 'name = "t"\npython = 3'), "matrix.python"),
    ("offline is a word", VALID.replace('name = "t"', 'name = "t"\noffline = "yes"'), "matrix.offline: expected true"),
    ("benchmarks not a list", VALID.replace('name = "t"', 'name = "t"\noffline = true\nbenchmarks = "grpo-vs-trl"'),
     "matrix.benchmarks: expected a list of benchmark names"),
    ("benchmarks online", VALID.replace('name = "t"', 'name = "t"\nbenchmarks = ["grpo-vs-trl"]'),
     "matrix.benchmarks: only an offline matrix"),
    ("include adds nothing", VALID + '[[include]]\nmodel = "text"\n', "include[0]: adds no cell"),
    ("known failure for a check not run",
     VALID + '[[known_failures]]\ncheck = "nested-chunking"\nwhen = { transformers = "==5.3.0" }\nreason = "r"\n'
             'link = "https://x.test/1"\nexpires = 2027-01-01\n', "'nested-chunking' is not run by this matrix"),
    ("known failure with a javascript link",
     VALID + '[[known_failures]]\ncheck = "stack-smoke"\nwhen = { transformers = "==5.3.0" }\nreason = "r"\n'
             'link = "javascript:alert(1)"\nexpires = 2027-01-01\n', "expected an https:// link"),
    ("standing rule with an unknown key", CHAT + STANDING + 'reason = "r"\n', "standing[0].reason: unknown key"),
    ("standing rule matching no cell", CHAT + STANDING + 'when = { transformers = ">6" }\n',
     "standing[0]: matches no cell"),
    ("standing rule without its upstream", CHAT + STANDING.replace('upstream = "vLLM\'s parser"\n', ""),
     "standing[0].upstream: missing"),
    ("standing rule naming no verdict of its check", CHAT + STANDING.replace("tool-calls-malformed", "vibes"),
     "vllm-chat-parity gives no verdict 'vibes'"),
    ("standing rule for a check not run", VALID + STANDING, "'vllm-chat-parity' is not run by this matrix"),
    ("standing rule with an empty name", CHAT + STANDING.replace('"the trainer\'s parser"', '" "'),
     "standing[0].ours: expected a name"),
]


@pytest.mark.parametrize("text, expected", [(t, e) for _, t, e in BAD], ids=[n for n, _, _ in BAD])
def test_bad_input_is_one_clear_error_naming_the_file(tmp_path, text, expected):
    with pytest.raises(InputError) as info:
        load_text(tmp_path, text)
    message = str(info.value)
    assert expected in message
    assert str(tmp_path / "m.toml") in message
    assert "\n" not in message


def test_a_file_that_is_not_utf8_is_an_input_error(tmp_path):
    path = tmp_path / "m.toml"
    path.write_bytes(VALID.encode() + b"# caf\xe9\n")
    with pytest.raises(InputError, match="not UTF-8 text") as info:
        matrix.load(path)
    assert str(path) in str(info.value)


def test_a_release_missing_from_the_index_is_named_with_its_line(tmp_path):
    from harness.matrix import index

    class Index:  # the two questions check_releases asks, answered from a fixed list
        url = "https://index.test/simple"

        def versions(self, name):
            return {"transformers": [index.Version("5.3.0")], "torch": [index.Version("2.13.0")],
                    "einops": [index.Version("0.8.1")]}.get(name, [])

        def has(self, name, version):
            return index.Version(version) in self.versions(name)

    m = load_text(tmp_path, VALID.replace('"5.3.0"', '"5.99.0"'))
    with pytest.raises(InputError, match=r"m.toml, line 6: transformers 5.99.0 does not exist") as info:
        index.check_releases({d: {v} for d, v in m.cells[0].pinned_releases().items()}, m.locate, Index())
    assert "\n" not in str(info.value)
    # Extra pins of an [[include]] are asked about too.
    m = load_text(tmp_path, VALID + '[[include]]\nmodel = "vl"\nrequirements = ["einops==9.9.9"]\n')
    assert m.cells[-1].pinned_releases()["einops"] == "9.9.9"
    wanted = {}
    for cell in m.cells:
        for dist, version in cell.pinned_releases().items():
            wanted.setdefault(dist, set()).add(version)
    with pytest.raises(InputError, match=r"line 13: einops 9.9.9 does not exist"):
        index.check_releases(wanted, m.locate, Index())


def test_errors_point_at_the_line_of_the_key(tmp_path):
    with pytest.raises(InputError, match=r"\(line 9\): axes.model"):
        load_text(tmp_path, VALID.replace('["text"]', '["huge"]'))


def test_cli_exits_2_on_a_bad_matrix_before_installing_anything(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(VALID.replace('"5.3.0"', '"5.3.x"'))
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--env-root", str(tmp_path / "envs")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")
    assert not (tmp_path / "envs").exists()


def test_images_differing_only_in_registry_or_digest_are_distinct_cells(tmp_path):
    images = ['"docker.io/org/cann:8.3-py3.11"', '"quay.io/org/cann:8.3-py3.11"',
              '"quay.io/org/cann:8.3-py3.11@sha256:' + "a" * 64 + '"']
    m = load_text(tmp_path, VALID.replace('device = ["cpu"]', f'device = ["cpu"]\nimage = [{", ".join(images)}]'))
    ids = [c.id for c in m.cells]
    assert len(m.cells) == 3 and len(set(ids)) == 3, ids
    assert all("img-cann-8.3-py3.11-" in i for i in ids)  # readable, then a short stable suffix
    again = load_text(tmp_path, VALID.replace('device = ["cpu"]', f'device = ["cpu"]\nimage = [{", ".join(images)}]'))
    assert [c.id for c in again.cells] == ids
    # An image whose readable form collides with nothing keeps the plain readable id.
    plain = load_text(tmp_path, VALID.replace('device = ["cpu"]', 'device = ["cpu"]\nimage = ["quay.io/org/cann:8.3"]'))
    assert plain.cells[0].id.endswith("-img-cann-8.3")


DUPLICATES = [
    ("a value twice in an axis", VALID.replace('["5.3.0"]', '["5.3.0", "5.5.3", "5.3.0"]'),
     r"line 6\): axes.transformers: '5.3.0' is listed twice"),
    ("one cell from two includes with different extra pins",
     VALID + '[[include]]\nmodel = "vl"\nrequirements = ["einops==0.8.1"]\n\n'
             '[[include]]\nmodel = "vl"\nrequirements = ["einops==0.8.2"]\n',
     r"line 15\): include\[1\]: cell fsdp-vl-tf5.3.0-torch2.13.0 is also made by include\[0\] \(line 11\) "
     r"with other extra pins"),
]


@pytest.mark.parametrize("text, expected", [(t, e) for _, t, e in DUPLICATES], ids=[n for n, _, _ in DUPLICATES])
def test_a_true_duplicate_is_an_error_naming_its_lines(tmp_path, text, expected):
    with pytest.raises(InputError, match=expected) as info:
        load_text(tmp_path, text)
    assert "\n" not in str(info.value)


LATER_LINES = [
    ("a bad value in an include", VALID + '[[include]]\nmodel = "vl"\n\n[[include]]\nmodel = "huge"\n',
     r"line 15\): include\[1\].model"),
    ("a bad choice in a later exclude", VALID.replace('["text"]', '["text", "vl"]') +
     '[[exclude]]\nmodel = "vl"\n\n[[exclude]]\nmodel = "huge"\n', r"line 15\): exclude\[1\].model"),
    ("a bad selector in a later tag", VALID + '[[tags]]\ntag = "a"\nwhen = { model = "text" }\n\n'
                                              '[[tags]]\ntag = "b"\nwhen = { model = "huge" }\n',
     r"line 17\): tags\[1\].when.model"),
    ("a tag that matches nothing", VALID + '[[tags]]\ntag = "a"\nwhen = { model = "text" }\n\n'
                                           '[[tags]]\ntag = "b"\nwhen = { model = "vl" }\n',
     r"line 15\): tags\[1\]: tag 'b' matches no cell"),
]


@pytest.mark.parametrize("text, expected", [(t, e) for _, t, e in LATER_LINES], ids=[n for n, _, _ in LATER_LINES])
def test_errors_in_later_rules_name_the_bad_line_not_the_first_mention(tmp_path, text, expected):
    with pytest.raises(InputError, match=expected):
        load_text(tmp_path, text)


# --- the python axis (a real cell on 3.12: tests/e2e/test_python_axis_cell.py) ----------------------------

def test_cells_without_the_axis_keep_their_ids_and_named_ones_get_a_py_part(tmp_path):
    m = load_text(tmp_path, VALID + INCLUDE_312)
    assert [c.id for c in m.cells] == ["fsdp-text-tf5.3.0-torch2.13.0",
                                       "megatron-text-tf5.3.0-torch2.13.0-mcore0.19.2-py3.12"]
    old, new = m.cells
    assert "python" not in old.axes and old.python is None  # the harness's own interpreter
    assert new.axes["python"] == "3.12" and new.python == "3.12"
    assert new.requirements == ["torch==2.13.0", "transformers==5.3.0", "megatron-core==0.19.2"]


def test_the_axis_expands_like_any_other(tmp_path):
    m = load_text(tmp_path, VALID.replace('device = ["cpu"]', 'device = ["cpu"]\npython = ["3.11", "3.12"]'))
    assert [c.id for c in m.cells] == ["fsdp-text-tf5.3.0-torch2.13.0-py3.11", "fsdp-text-tf5.3.0-torch2.13.0-py3.12"]


def test_matrix_python_is_the_default_interpreter_and_rules_see_it(tmp_path):
    text = VALID.replace('checks = ["stack-smoke"]', 'checks = ["stack-smoke"]\npython = "3.11"') + INCLUDE_312 + \
        textwrap.dedent("""
        [[tags]]
        tag = "py312"
        when = { python = ">=3.12" }

        [[tags]]
        tag = "py311"
        when = { python = "<3.12" }
        """)
    m = load_text(tmp_path, text)
    old, new = m.cells
    assert old.id == "fsdp-text-tf5.3.0-torch2.13.0" and old.python == "3.11" and "python" not in old.axes
    assert "py311" in old.tags and "py312" not in old.tags
    assert "py312" in new.tags and "py311" not in new.tags


def test_rules_select_and_exclude_by_python_version(tmp_path):
    three = VALID.replace('device = ["cpu"]', 'device = ["cpu"]\npython = ["3.11", "3.12", "3.13"]')
    text = three + textwrap.dedent("""
        [[exclude]]
        python = "==3.13"

        [[tags]]
        tag = "new-python"
        when = { python = ">=3.12" }
        """)
    m = load_text(tmp_path, text)
    assert [c.axes["python"] for c in m.cells] == ["3.11", "3.12"]
    assert [c.axes["python"] for c in m.select(tags=["new-python"])] == ["3.12"]


@pytest.mark.parametrize("edit, expected", [
    (('device = ["cpu"]', 'device = ["cpu"]\npython = ["3.x"]'), r"m.toml \(line 11\): axes.python: '3.x' is not"),
    (('device = ["cpu"]', 'device = ["cpu"]\npython = ["python3.12"]'), r"axes.python: 'python3.12' is not"),
    (('device = ["cpu"]', 'device = ["cpu"]\npython = ["--index-url=x"]'), r"axes.python: '--index-url=x' is not"),
    (('device = ["cpu"]', 'device = ["cpu"]\npython = [3.12]'), r"axes.python: expected a non-empty list of strings"),
    (('device = ["cpu"]', 'device = ["cpu"]\n\n[[tags]]\ntag = "x"\nwhen = { python = ">=three" }'),
     r"tags\[0\].when.python: invalid version specifier"),
    (('checks = ["stack-smoke"]', 'checks = ["stack-smoke"]\npython = "3.11"\n[axes]\npython = ["3.12"]'), None),
])
def test_bad_python_values_are_one_line_errors_naming_file_and_line(tmp_path, edit, expected):
    text = VALID.replace(*edit)
    if expected is None:  # [matrix] python and [axes] python together: the default would never be used
        text = VALID.replace('checks = ["stack-smoke"]', 'checks = ["stack-smoke"]\npython = "3.11"').replace(
            'device = ["cpu"]', 'device = ["cpu"]\npython = ["3.12"]')
        expected = r"m.toml \(line 4\): matrix.python: unused"
    with pytest.raises(InputError, match=expected) as info:
        load_text(tmp_path, text)
    assert "\n" not in str(info.value)


def test_cli_exits_2_on_a_bad_python_value(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(VALID.replace('device = ["cpu"]', 'device = ["cpu"]\npython = ["3.12; rm -rf"]'))
    done = subprocess.run([sys.executable, "-m", "harness", "matrix", "list", str(path)], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "line 11" in done.stderr and "axes.python" in done.stderr
