"""The checkpoint cadence (job/goodput.py) against the published arithmetic, and as a user meets it:
``render`` states it, ``plan.json`` and ``--json`` carry it, the job exports it, the site may set it."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from clusterkit.job import goodput
from tests.conftest import CLI, REPO, assert_one_line_error


def test_llama3_scale_fails_every_three_hours_and_saves_every_nineteen_minutes() -> None:
    # the figures: 16,384 GPUs at 1.97e-5 failures per GPU-hour -> MTBF 3.1 h;
    # 60 s saves -> an interval of about 19 minutes (Young: sqrt(2 * 60 s * 11,153 s) = 1,157 s)
    m = goodput.mtbf_s(16384, 1.97e-5)
    assert m / 3600 == pytest.approx(3.098, abs=0.001)
    assert goodput.young_interval_s(60, m) / 60 == pytest.approx(19.28, abs=0.01)
    daly = goodput.daly_interval_s(60, m)
    assert 18 * 60 < daly < 19.5 * 60   # Daly's correction: a little under Young's, less the save itself
    c = goodput.cadence(16384, None, 60, 300)
    assert c.interval_s == round(daly) and c.rate_from.startswith("default (Llama 3")
    assert c.mtbf_s == pytest.approx(m, abs=0.1)


def test_daly_is_the_optimum_of_his_own_model() -> None:
    # the interval Daly's formula gives is where the expected ETTR (his eq. 20) peaks: the
    # two are written independently, so a slip in either moves the peak
    for gpus, save in ((16384, 60), (2048, 600), (512, 30)):
        m = goodput.mtbf_s(gpus, 1.97e-5)
        best = goodput.daly_interval_s(save, m)
        grid = [best * f for f in (0.5, 0.7, 0.85, 0.95, 1.05, 1.2, 1.5, 2.0)]
        at_best = goodput.expected_ettr(best, save, 300, m)
        assert all(goodput.expected_ettr(t, save, 300, m) < at_best for t in grid), (gpus, save)


def test_ettr_agrees_with_a_simulated_run() -> None:
    # Monte-Carlo over exponential failures (the model's assumption), by another route: play
    # the run out segment by segment; within 1 % of the closed form over 20,000 failures
    rng = random.Random(7)
    m, save, restart = goodput.mtbf_s(16384, 1.97e-5), 60.0, 300.0
    tau = goodput.daly_interval_s(save, m)
    kept = wall = 0.0
    failures = 0
    while failures < 20000:
        t = rng.expovariate(1 / m)
        if t < restart:
            wall += t
            failures += 1
            continue
        wall += restart
        t -= restart
        done = math.floor(t / (tau + save))
        kept += done * tau
        wall += t
        failures += 1
    expected = goodput.expected_ettr(tau, save, restart, m)
    assert kept / wall == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("bad", [(0, 1.97e-5), (8, 0.0), (8, -1.0)])
def test_nonsense_inputs_are_refused(bad: tuple[int, float]) -> None:
    with pytest.raises(ValueError):
        goodput.mtbf_s(*bad)


def test_render_states_the_cadence_and_the_job_exports_it(ck: CLI, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = ck("render", "--site", str(REPO / "site_configs" / "ib-h100.yaml"), "--stage", "large-cluster",
             "--nodes", "64", "--out", str(out), "--", "python", "train.py")
    assert res.code == 0, res.err
    m = goodput.mtbf_s(512, 1.97e-5)
    interval = round(goodput.daly_interval_s(60, m))
    assert f"checkpoint every 108 min (CK_CHECKPOINT_INTERVAL_S={interval})" in res.out
    assert "512 GPU(s)" in res.out
    assert f"export CK_CHECKPOINT_INTERVAL_S={interval}\n" in (out / "job.sbatch").read_text()
    plan = json.loads((out / "plan.json").read_text())
    assert plan["cadence"]["interval_s"] == interval and plan["cadence"]["gpus"] == 512
    js = ck("render", "--site", str(REPO / "site_configs" / "ib-h100.yaml"), "--stage", "large-cluster",
            "--nodes", "64", "--json", "--", "python", "train.py")
    assert json.loads(js.out)["cadence"] == plan["cadence"]


def test_the_site_sets_the_rate_and_costs(ck: CLI, tmp_path: Path) -> None:
    site = tmp_path / "mine.yaml"
    site.write_text(f"extends: {REPO / 'site_configs' / 'ib-h100.yaml'}\n"
                    "reliability: {gpu_failures_per_hour: 1.0e-4, checkpoint_save_s: 240, restart_s: 900}\n")
    res = ck("render", "--site", str(site), "--stage", "large-cluster", "--nodes", "16", "--json",
             "--", "python", "train.py")
    assert res.code == 0, res.err
    cad = json.loads(res.out)["cadence"]
    m = goodput.mtbf_s(128, 1.0e-4)
    assert cad["rate_from"] == "site" and cad["save_s"] == 240 and cad["restart_s"] == 900
    assert cad["interval_s"] == round(goodput.daly_interval_s(240, m))
    assert cad["ettr"] == pytest.approx(goodput.expected_ettr(goodput.daly_interval_s(240, m), 240, 900, m), abs=1e-4)


def test_a_bad_rate_names_the_file_line_and_key(ck: CLI, tmp_path: Path) -> None:
    site = tmp_path / "bad.yaml"
    site.write_text(f"extends: {REPO / 'site_configs' / 'ib-h100.yaml'}\n"
                    "reliability:\n  gpu_failures_per_hour: -3\n")
    res = ck("render", "--site", str(site), "--", "python", "train.py")
    assert_one_line_error(res, 2, f"{site}:3", "reliability.gpu_failures_per_hour")


def test_submit_dry_run_says_it_too(ck: CLI) -> None:
    res = ck("submit", "--site", str(REPO / "site_configs" / "ib-h100.yaml"), "--stage", "large-cluster",
             "--nodes", "64", "--dry-run", "--no-snapshot", "--", "python", "train.py")
    assert res.code == 0, res.err
    said = [line for line in res.err.splitlines() if "CK_CHECKPOINT_INTERVAL_S=" in line]
    assert len(said) == 1 and said[0].startswith("clusterkit: dry run: checkpoint every "), res.err
    assert "export CK_CHECKPOINT_INTERVAL_S=" in res.out


def test_plan_gives_the_cadence_of_its_recommendation_with_measured_costs(ck: CLI) -> None:
    """``clusterkit plan`` states the cadence for the GPUs it recommends; ``--save-s`` and
    ``--restart-s`` take what a run measured (status --run, bench/recovery.py) over the site's."""
    res = ck("plan", "--site", "ib-h100", "--model-params", "70B", "--nodes", "16", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    c = doc["cadence"]
    assert c["gpus"] == doc["recommended"]["gpus"] == 128 and (c["save_s"], c["restart_s"]) == (60, 300)
    assert c["interval_s"] == goodput.cadence(128, None, 60, 300).interval_s
    fed = json.loads(ck("plan", "--site", "ib-h100", "--model-params", "70B", "--nodes", "16", "--save-s", "20",
                        "--restart-s", "17", "--json").out)["cadence"]
    want = goodput.cadence(128, None, 20, 17)
    assert (fed["save_s"], fed["restart_s"], fed["interval_s"], fed["ettr"]) == (20, 17, want.interval_s, want.ettr)
    text = ck("plan", "--site", "ib-h100", "--model-params", "70B", "--nodes", "16", "--save-s", "20")
    assert text.code == 0 and f"CK_CHECKPOINT_INTERVAL_S={goodput.cadence(128, None, 20, 300).interval_s}" in text.out
    assert_one_line_error(ck("plan", "--site", "ib-h100", "--model-params", "7B", "--save-s", "0"), 2,
                          "--save-s 0: seconds, above 0 and at most 86400")
