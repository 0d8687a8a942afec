"""maintainers/mutants.py: every mutant still applies to the code it was
written for (a refactor that moves the text leaves a mutant that can only
crash the tool, and a tier nobody measures)."""

from __future__ import annotations

from pathlib import Path

import mutants
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_each_mutant_changes_one_place_of_its_file(mutant):
    text = (ROOT / mutant.path).read_text()
    assert text.count(mutant.old) == 1, (
        f"{mutant.path} has it {text.count(mutant.old)}x"
    )
    assert mutant.old != mutant.new
    for hint in mutant.hint:
        assert (ROOT / hint).is_file(), hint


def test_mutant_names_are_unique():
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) == len(set(names))
