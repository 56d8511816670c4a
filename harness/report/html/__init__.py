"""report.html: the page (page.py), its first screen (first_screen.py), the details per version combination
(details.py) and the reward plots (plots.py)."""
