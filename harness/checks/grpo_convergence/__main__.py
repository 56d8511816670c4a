"""`python -m harness.checks.grpo_convergence`: the check alone, or `--regenerate` its reference."""
import sys

from harness.checks.grpo_convergence import main

sys.exit(main())
