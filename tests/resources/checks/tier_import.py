"""A module that sets an environment variable when imported, as vLLM's import does: only the checks that ask
for it (a check server's tier) may see either."""
import os

os.environ["TIER_IMPORTED"] = "1"
