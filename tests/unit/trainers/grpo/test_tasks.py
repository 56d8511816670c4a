"""Toy tasks: deterministic prompts, rewards in [0, 1], a random policy starts well below 0.5."""
import random

import pytest

from trainers.grpo.tasks import FIRST_ID, LAST_ID, TASKS, make_task


@pytest.mark.parametrize("name", sorted(TASKS))
def test_deterministic_and_bounded(name):
    task = make_task(name)
    first = task.prompts(16, random.Random(7))
    assert first == task.prompts(16, random.Random(7))
    assert first != task.prompts(16, random.Random(8))
    rng = random.Random(0)
    for prompt in first:
        response = [rng.randint(0, 127) for _ in range(8)]
        assert 0.0 <= task.reward(prompt, response) <= 1.0
        assert all(FIRST_ID <= t <= LAST_ID for t in prompt)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_uniform_random_policy_scores_low(name):
    task, rng = make_task(name), random.Random(1)
    prompts = task.prompts(400, rng)
    mean = sum(task.reward(p, [rng.randrange(128) for _ in range(8)]) for p in prompts) / len(prompts)
    assert 0.05 < mean < 0.3


def test_rewards_by_hand():
    target = make_task("target-set")  # first class: ids 3..31
    assert target.reward([50] * 6, [3, 31, 32, 2, 100, 3, 4, 5]) == pytest.approx(5 / 8)
    assert target.reward([50] * 6, [3, 2]) == pytest.approx(1 / 8)  # early EOS forfeits the rest
    marker = make_task("marker-class")
    assert marker.reward([4] * 6, [32, 60, 3, 0, 0, 0, 0, 0]) == pytest.approx(2 / 8)  # class 1 is 32..60
    match = make_task("match-class")
    assert match.reward([33, 40], [33] * 8) == 1.0 and match.reward([3, 4], [33] * 8) == 0.0
    copy = make_task("copy")
    assert copy.reward([5, 6, 7], [5, 6, 9, 9, 9, 9, 9, 7]) == pytest.approx(3 / 8)
    with pytest.raises(ValueError):
        make_task("nope")
