"""A module that sets an environment variable when imported, as vLLM's import does: only the checks that ask
for it (a check server's tier) may see either. It also notes whether the collector was running as it was imported."""
import gc
import os

os.environ["TIER_IMPORTED"] = "1"
COLLECTING_AT_IMPORT = gc.isenabled()  # whether the collector ran while the tier imported this
