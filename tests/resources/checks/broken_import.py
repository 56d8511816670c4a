"""A module whose import fails halfway, as a package broken against the installed torch does."""
raise RuntimeError("this package is broken against the installed torch")
