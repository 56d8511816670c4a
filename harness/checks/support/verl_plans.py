"""launch-plans in a row that installs verl: verl's own Qwen3.5 example scripts of that release (`verl:plan/<script>`).

verl ships its scripts only in its git repository, so harness/plans/verl_sources fetches those of the installed
release's revision. For each one:
1. it is run under recording stubs (harness/plans/verl_launch) and its launch of verl is read;
2. verl's own start-up check is asked of that launch: its Hydra overrides composed with the installed release's own
   trainer config (the folder verl.trainer.main_ppo loads, `ppo_trainer` or the name the script gives), then
   `verl.utils.config.validate_config`, which main_ppo runs before anything starts;
3. the launch, read as a launch plan (device memory from verl_launch's table), is judged by this project's start-up
   rules and memory estimate (harness.plans.verdict.evaluate), as the plans in plans/ are.
A verdict passes when verl's own check accepts the launch and the plan would start; fails when verl's check
rejects it or the plan would not start; is a skip, saying what verl's own check said, where the launch cannot be
read as a plan (what is missing is named) or a rule cannot be answered here. Without the scripts (a runner that
cannot reach github.com) there is one skip, `verl:plans`, saying so.
"""
from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path

from harness.checks.support import verl
from harness.errors import InputError
from harness.results.records import Status, Verdict

OWN_CONFIG = (None, "config")  # the config folder main_ppo names itself (relative to its module)


def verl_check(launch) -> tuple[str | None, list]:
    """(None when verl's own start-up check accepts the launch, else its objection; the verl functions asked)."""
    if launch.module != "verl.trainer.main_ppo":
        return f"not asked: it launches {launch.module}, not verl.trainer.main_ppo", []
    if launch.config_path not in OWN_CONFIG:
        return f"not asked: it names its own config folder ({launch.config_path}), not the release's", []
    try:
        import verl.trainer
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
    except ImportError as exc:  # this row's environment, not the launch: no verdict on it either way
        return f"not asked: verl's config check does not import here ({type(exc).__name__}: {exc})", []
    ran = [validate_config, need_reference_policy, need_critic]
    folder = str(Path(verl.trainer.__file__).parent / "config")  # what main_ppo names (config_path="config")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=folder, version_base=None), contextlib.redirect_stdout(sys.stderr):
            config = compose(config_name=(launch.config_name or "ppo_trainer").removesuffix(".yaml"),
                             overrides=launch.overrides)
            validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    except Exception as exc:  # noqa: BLE001 - verl's own check refusing the launch is this verdict's finding
        return f"verl's own config check rejects it: {type(exc).__name__}: {str(exc).splitlines()[0][:240]}", ran
    finally:
        GlobalHydra.instance().clear()
    return None, ran


def project_rules(plan_fields: dict) -> tuple[str, str]:
    """(this project's verdict on the plan: would start | would not start | unchecked, its reasons)."""
    from harness.plans import verl_launch
    from harness.plans.plan_format import load_plan
    from harness.plans.verdict import NO_START, evaluate

    with tempfile.TemporaryDirectory(prefix="verl-plan-") as folder:
        path = Path(folder) / "plan.toml"
        path.write_text(verl_launch.plan_toml(plan_fields), encoding="utf-8")
        try:
            plan = load_plan(path)
        except InputError as exc:  # its message names the temporary file first: the field is what matters
            raise InputError(str(exc).removeprefix(f"{path}: ")) from None
        result = evaluate(plan)
    wanted = "fail" if result.verdict == NO_START else "unchecked"
    reasons = "; ".join(f"{f.field}: {f.message}" for f in result.findings if f.status == wanted)
    memory = result.memory_gib.get("total")
    return result.verdict, reasons or (f"{memory:g} GiB per device" if memory is not None else "")


def script_verdict(path: str, text: str, origin: str) -> Verdict:
    from harness.plans import verl_launch
    from harness.plans.verdict import NO_START, START

    part = "plan/" + path.removeprefix("examples/").removesuffix(".sh")
    device = verl_launch.device_of(path)
    try:
        launch = verl_launch.launch(verl_launch.record(text, device))
    except verl_launch.NotRun as why:
        return verl.verdict(part, Status.SKIP, f"verl's {path} (from {origin}), DEVICE={device}: {why}", [])
    objection, ran = verl_check(launch)
    said = objection or "verl's own config check accepts it"
    head = f"verl's {path}, DEVICE={device}: {said}"
    metrics = {"script": path, "origin": origin, "device": device, "module": launch.module,
               "overrides": len(launch.overrides), "verl_check": said}
    if objection and ran:
        return verl.verdict(part, Status.FAIL, head, ran, metrics)
    plan_fields, missing = verl_launch.derive(path, launch, device)
    metrics["plan"] = plan_fields
    if missing:
        return verl.verdict(part, Status.SKIP, f"{head}; not read as a plan: {'; '.join(missing)}", ran, metrics)
    try:
        outcome, reasons = project_rules(plan_fields)
    except InputError as exc:  # a model without plans/models/<name>.json, a value the plan format refuses
        return verl.verdict(part, Status.SKIP, f"{head}; no plan: {exc}", ran, metrics)
    metrics["project_rules"] = outcome
    status = Status.PASS if outcome == START else Status.FAIL if outcome == NO_START else Status.SKIP
    if status is Status.PASS and not ran:
        status = Status.SKIP  # the plan starts, but verl's own check was not asked: nothing to pass for verl
    return verl.verdict(part, status, f"{head}; this project's rules: {outcome} ({reasons})", ran, metrics)


def verdicts() -> list[Verdict]:
    from harness.plans import verl_sources

    try:
        scripts, origin = verl_sources.scripts(verl.installed() or "")
    except verl_sources.Unavailable as why:
        return [verl.verdict("plans", Status.SKIP, str(why), [])]
    if not scripts:
        return [verl.verdict("plans", Status.SKIP, f"no Qwen3.5 example script at {origin}", [])]
    return [script_verdict(path, text, origin) for path, text in sorted(scripts.items())]


def add(result, made: list[Verdict]):
    """launch-plans' result with the verl verdicts: one that fails fails the check; the message counts them."""
    result.verdicts += made
    failed = [v.name for v in made if v.status is Status.FAIL]
    counts = ", ".join(f"{sum(v.status is s for v in made)} {s.value}" for s in (Status.PASS, Status.FAIL, Status.SKIP)
                       if any(v.status is s for v in made))
    result.message = f"{result.message}; verl's own Qwen3.5 scripts: {counts}"
    if len(made) == 1 and made[0].status is Status.SKIP:
        result.message += f" ({made[0].message})"
    if failed:
        result.status = Status.FAIL
        result.message += f" (failing: {', '.join(failed)})"
    return result
