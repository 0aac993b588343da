"""Tiered hints: each `grader hint` call reveals one more, remembered in .grader/hints.json."""
from pathlib import Path

from grader.manifest import Exercise
from grader.state import load_hint_tiers, save_hint_tiers, state_lock


def reveal_next(root: Path, exercise: Exercise) -> int:
    """Reveals the next hint (the last one stays) and returns its tier, counting from 1."""
    with state_lock(root):
        tiers = load_hint_tiers(root)
        tier = min(tiers.get(exercise.key, 0) + 1, len(exercise.hints))
        tiers[exercise.key] = tier
        save_hint_tiers(root, tiers)
    return tier


def revealed(root: Path, exercise: Exercise) -> int:
    return load_hint_tiers(root).get(exercise.key, 0)


def reset(root: Path, exercise: Exercise) -> None:
    with state_lock(root):
        tiers = load_hint_tiers(root)
        tiers.pop(exercise.key, None)
        save_hint_tiers(root, tiers)
