"""The import-only Transformer Engine stand-in stays inside the module it is served to."""
from __future__ import annotations

import sys
import textwrap

import pytest

from harness.checks.bridge_parity import te_import


def test_the_stand_in_is_served_only_to_its_module(tmp_path, monkeypatch):
    package = tmp_path / "standin_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "uses_te.py").write_text(textwrap.dedent("""\
        import transformer_engine.pytorch as te

        def annotated() -> tuple[te.ops.Sequential, te.Linear]:
            return te
        """))
    (package / "guards_te.py").write_text(textwrap.dedent("""\
        try:
            import transformer_engine  # noqa: F401
            HAVE_TE = True
        except ImportError:
            HAVE_TE = False
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    scope = te_import._Scope({"standin_probe.uses_te"})
    monkeypatch.setattr(sys, "meta_path", [scope, *sys.meta_path])
    if not te_import.needed():
        pytest.skip("Transformer Engine is installed here")
    import standin_probe.guards_te
    import standin_probe.uses_te

    te = standin_probe.uses_te.annotated()
    assert not isinstance(object(), te.Linear)
    with pytest.raises(RuntimeError, match="import-only stand-in"):
        te.ops.Sequential()
    assert standin_probe.guards_te.HAVE_TE is False  # a guard elsewhere still sees Transformer Engine absent
    assert "transformer_engine" not in sys.modules
    assert scope.served == [("standin_probe.uses_te", "transformer_engine.pytorch")]
