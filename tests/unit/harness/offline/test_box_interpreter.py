"""What the box's interpreter has: a `pip freeze` list with a line that is not name==version is refused naming
its line."""
from __future__ import annotations

import pytest

from harness.errors import InputError
from harness.offline import box_interpreter


def test_a_bad_package_list_names_its_line(tmp_path):
    path = tmp_path / "freeze.txt"
    path.write_text("torch==2.11.0\nmy-build @ file:///x\n")
    with pytest.raises(InputError, match=r"freeze.txt, line 2: .*not a name==version"):
        box_interpreter.read(path)
