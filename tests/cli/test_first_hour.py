"""What a new user met in their first hour (the stage a node count implies, ...), through the
command line as they typed it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import assert_one_line_error


def test_nodes_alone_pick_the_stage_that_holds_them(ck, tmp_path: Path) -> None:
    """`render --site S --nodes 4` is a multi-node job, as it is for the Python API."""
    result = ck("render", "--json", "--site", "ib-h100", "--nodes", "4", "--", "python", "t.py", cwd=tmp_path)
    assert result.code == 0, result.err
    assert json.loads(result.out)["stage"] == "multi-node"
    from clusterkit import Site

    assert Site.load("ib-h100").plan(["python", "t.py"], nodes=4).render(write=False).plan.stage == "multi-node"
    many = ck("render", "--json", "--site", "ib-h100", "--nodes", "12", "--", "python", "t.py", cwd=tmp_path)
    assert many.code == 0 and json.loads(many.out)["stage"] == "large-cluster", many.err
    one = ck("render", "--json", "--site", "ib-h100", "--", "python", "t.py", cwd=tmp_path)
    assert one.code == 0 and json.loads(one.out)["stage"] == "single-node", one.err


@pytest.mark.parametrize(("stage", "nodes", "fix"), [("single-node", "4", "multi-node"),
                                                     ("multi-node", "1", "single-node"),
                                                     ("large-cluster", "4", "multi-node")])
def test_a_stage_that_does_not_hold_the_nodes_names_the_one_that_does(ck, tmp_path: Path, stage: str, nodes: str,
                                                                      fix: str) -> None:
    result = ck("render", "--site", "ib-h100", "--stage", stage, "--nodes", nodes, "--", "python", "t.py",
                cwd=tmp_path)
    assert_one_line_error(result, 2, f"--nodes {nodes} is outside stage {stage}", f"use --stage {fix}")
    from clusterkit import Site
    from clusterkit.errors import PlanError

    with pytest.raises(PlanError, match=f"use stage={fix}$"):
        Site.load("ib-h100").plan(["python", "t.py"], stage=stage, nodes=int(nodes)).render(write=False)
