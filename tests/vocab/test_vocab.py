"""The closed vocabularies every layer imports (clusterkit.vocab)."""

from __future__ import annotations

import pytest

from clusterkit.vocab import LAUNCHERS, STAGE_NAMES, STAGES, JobState, stage_for_nodes


def test_stage_ranges() -> None:
    assert STAGE_NAMES == ("single-node", "multi-node", "large-cluster")
    assert [STAGES[n].node_range for n in STAGE_NAMES] == ["1", "2-8", "9+"]


@pytest.mark.parametrize("nodes, stage", [(0, "single-node"), (1, "single-node"), (2, "multi-node"),
                                          (8, "multi-node"), (9, "large-cluster"), (10_000, "large-cluster")])
def test_stage_for_nodes(nodes: int, stage: str) -> None:
    assert stage_for_nodes(nodes) == stage


def test_every_launcher_has_a_module() -> None:
    from clusterkit.job import launchers

    for name in LAUNCHERS:
        assert callable(launchers.get(name))


@pytest.mark.parametrize("text, state, terminal", [("CANCELLED by 0", JobState.CANCELLED, True),
                                                   ("COMPLETED+", JobState.COMPLETED, True),
                                                   ("RUNNING", JobState.RUNNING, False),
                                                   ("", JobState.UNKNOWN, False), ("bogus", JobState.UNKNOWN, False)])
def test_job_state_parse(text: str, state: JobState, terminal: bool) -> None:
    assert JobState.parse(text) is state and state.is_terminal is terminal
