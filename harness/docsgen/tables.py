"""Each table of the docs as a pure function of what it describes, rendered as Markdown."""
from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

from tabulate import tabulate

from harness import errors
from harness.checks import CHECKS

ROOT = Path(__file__).resolve().parents[2]
# A full stop that ends a sentence: followed by white space or the end, and not that of "e.g." or "i.e.".
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)\.(?=\s|$)")


def first_sentence(doc: str) -> str:
    """A docstring's first sentence, with its full stop, whitespace folded (a sentence may span lines)."""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    end = _SENTENCE_END.search(paragraph)
    return paragraph[: end.end()] if end else paragraph


def _cell(text: str) -> str:
    """One Markdown table cell: pipes escaped, whitespace folded (a docstring spans lines)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(headers: list[str], rows: list[list[str]]) -> str:
    return tabulate([[_cell(c) for c in row] for row in rows], headers=headers, tablefmt="github")


def checks_table(link_prefix: str = "") -> str:
    """Every registered check: its page, the backends it runs on, its time limit and what it answers."""
    rows = [[f"[`{spec.name}`]({link_prefix}{spec.name}.md)", ", ".join(spec.backends), f"{spec.timeout:.0f} s",
             spec.summary] for spec in CHECKS.values() if spec.module.startswith("harness.checks.")]
    return _table(["check", "backends", "time limit", "what it answers"], rows)


def verl_table() -> str:
    """Every registered check and, in a verl row, the verl code it runs (CheckSpec.verl) or "no verl counterpart"."""
    rows = [[f"[`{spec.name}`](checks/{spec.name}.md)", spec.verl or "no verl counterpart: this project's code only"]
            for spec in CHECKS.values() if spec.module.startswith("harness.checks.")]
    return _table(["check", "in a verl row"], rows)


def exit_status_table() -> str:
    """0, 1 and 130 from harness/errors.py's constants, the rest from its error classes' docstrings."""
    rows = [[str(errors.DONE), "done", "the verb did its work; a run's check failures are in the report, not the "
             "status"],
            [str(errors.CHECK_FAILED), "check failed", "`check` or `repro`: its one check failed (fail, error, crash, "
             "timeout)"],
            *_status_rows(errors.HarnessError),
            [str(errors.INTERRUPTED), "interrupted", "Ctrl-C or SIGTERM; finished cell files are kept"]]
    return _table(["status", "meaning", "when"], rows)


def trainer_exit_status_table() -> str:
    """The trainers' own statuses (`python -m trainers.fsdp` / `trainers.megatron`), from trainers/errors.py."""
    from trainers import errors as trainer_errors

    rows = [["0", "done", "the run finished its steps"], *_status_rows(trainer_errors.TrainerError),
            ["1", "an error of the stack", "anything else, with its traceback"]]
    return _table(["status", "meaning", "when"], rows)


def _status_rows(base: type) -> list[list[str]]:
    """One row per error class of `base`'s own module with a status of its own, in status order. Only that
    module's classes: another module or a test may subclass them in the same process."""
    classes = [cls for cls in _subclasses(base) if cls is not base and "exit_code" in vars(cls)
               and cls.__module__ == base.__module__]
    return [[str(cls.exit_code), cls.__name__, _when(inspect.getdoc(cls) or "")]
            for cls in sorted(classes, key=lambda cls: cls.exit_code)]


def _subclasses(cls: type) -> list[type]:
    found = [cls]
    for sub in cls.__subclasses__():
        found += _subclasses(sub)
    return found


def _when(doc: str) -> str:
    """An error class's first sentence without its "; exit N" (the table's own column says the status)."""
    return first_sentence(doc).split("; exit")[0].rstrip(".")


def nox_sessions(listing: list[dict] | None = None) -> list[dict]:
    """`nox -l --json -t all` without the per-cell sessions (one row stands for them)."""
    if listing is None:
        listing = _nox_listing()
    return [entry for entry in listing if not {"cell", "offline-cell"} & set(entry.get("tags") or [])]


@functools.cache
def _nox_listing() -> list[dict]:
    """nox's listing, each session's description its whole docstring (nox lists only its first line)."""
    done = subprocess.run([sys.executable, "-m", "nox", "-l", "--json", "-t", "all"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    docstrings = session_docstrings(ROOT / "noxfile.py")
    return [{**entry, "description": docstrings.get(entry.get("name", ""), entry.get("description") or "")}
            for entry in json.loads(done.stdout)]


def session_docstrings(noxfile: Path) -> dict[str, str]:
    """Session name -> its function's docstring, read from the noxfile (not imported: it needs nox)."""
    found = {}
    for node in ast.walk(ast.parse(noxfile.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call else decorator
            if isinstance(target, ast.Attribute) and target.attr == "session":
                names = [k.value.value for k in (call.keywords if call else ()) if k.arg == "name"
                         and isinstance(k.value, ast.Constant)]
                found[names[0] if names else node.name] = ast.get_docstring(node) or ""
    return found


def sessions_table(listing: list[dict] | None = None, full: bool = False) -> str:
    """One row per nox session: the first sentence of its docstring (the whole docstring with full=True)."""
    rows = []
    for entry in nox_sessions(listing):
        description = entry.get("description") or ""
        text = description if full else first_sentence(description)
        rows.append([f"`{entry['session']}`", text])
    rows.append(["`cell-<matrix>(<cell id>)`", "one cell of a matrix; `nox -l --json -t cell` lists them with their "
                 "call_spec (`-t offline-cell`: an offline box's), `nox -t TAG` runs the cells a matrix tags"])
    return _table(["session", "what it does"], rows)


def check_doc(name: str) -> str:
    """A check's module docstring (read from its file, not imported: checks import torch), as Markdown."""
    spec = importlib.util.find_spec(CHECKS[name].module)
    doc = ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))) or ""
    head, _, rest = doc.partition("\n")
    return f"{head.partition(': ')[2] or head}\n{rest}".strip() + "\n"
