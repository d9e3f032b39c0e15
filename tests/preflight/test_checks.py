"""The remote script and its evaluation, run with a real shell against the lab's node profiles.

No SSH here: the script is executed locally with the profile's ``bin`` first on PATH and its
``root`` as ``CLUSTERKIT_SYSROOT``, exactly as the lab's ForceCommand does on a virtual node.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from clusterkit.nodes.script import split_sections
from clusterkit.preflight.catalogue import select_checks
from clusterkit.preflight.engine import (
    LARGE,
    SINGLE,
    Status,
    evaluate,
)
from tests.preflight.check_helpers import PROFILES, Judged, expect, failures, judge_profiles, results, storage


@pytest.fixture(scope="module")
def default_judged(tmp_path_factory: pytest.TempPathFactory) -> Judged:
    """The default expectations (:func:`expect`) judged once on the profiles the tests below read."""
    return judge_profiles(select_checks(expect()), ["healthy", "gpu_missing", "ib_down", "old_driver", "no_lustre",
                                                    "ecc_errors", "garbage_smi"], tmp_path_factory.mktemp("profiles"))


def test_healthy_node_passes_every_check(default_judged: Judged) -> None:
    check_set = default_judged.check_set
    res = default_judged.by_profile["healthy"]
    assert failures(res) == {}
    assert {r.status for r in res.values()} == {Status.OK}
    assert res["gpu.count"].message == "8 GPUs"
    assert res["gpu.cuda"].message == "CUDA 12.4"
    assert res["ib.ports"].message == "ports ACTIVE/LinkUp"
    assert res["ib.peermem"].message == "nvidia_peermem loaded"
    lustre = res["storage.mounted:/lustre/scratch"].message
    assert lustre.startswith("/lustre/scratch mounted (lustre from 10.0.0.1@o2ib:/scratch")
    assert res["storage.writable:/lustre/scratch"].status is Status.OK
    assert res["storage.mounted:/home"].message.startswith("/home mounted (nfs4")
    # every configured check was judged: nothing silently missing
    assert len(res) == len(check_set.checks)


@pytest.mark.parametrize(
    "profile,key,words",
    [
        ("gpu_missing", "gpu.count", "7 GPUs, expected 8"),
        ("ib_down", "ib.ports", "mlx5_3 port 1 DOWN (Disabled)"),
        ("ib_down", "ib.rate", "mlx5_3 port 1 10 Gb/s < 400 Gb/s"),
        ("old_driver", "gpu.driver", "driver 470.239.06 < 535.104 required"),
        ("old_driver", "gpu.cuda", "CUDA 11.4 < 12.4 required"),
        ("no_lustre", "storage.mounted:/lustre/scratch",
         "/lustre/scratch not mounted as lustre (only / (ext4) serves it)"),
        ("ecc_errors", "gpu.ecc", "uncorrected ECC errors (GPU 5: 3)"),
        ("garbage_smi", "gpu.present", "could not parse nvidia-smi --query-gpu"),
    ],
)
def test_bad_profiles_fail_the_right_check(default_judged: Judged, profile: str, key: str, words: str) -> None:
    res = default_judged.by_profile[profile]
    assert res[key].status is Status.FAIL
    assert words in res[key].message


def test_bad_profile_fails_only_its_own_checks(default_judged: Judged) -> None:
    fails = failures(default_judged.by_profile["ib_down"])
    assert set(fails) == {"ib.ports", "ib.rate"}


def test_garbage_keeps_raw_text_and_skips_dependent_gpu_checks(default_judged: Judged) -> None:
    res = default_judged.by_profile["garbage_smi"]
    assert "segfault at 0000" in (res["gpu.present"].raw or "")
    assert res["gpu.count"].status is Status.SKIP and res["gpu.driver"].status is Status.SKIP
    assert res["ib.ports"].status is Status.OK  # the rest of the node is still judged


def test_hung_mount_is_a_bounded_failure(tmp_path: Path) -> None:
    check_set = select_checks(expect())
    res = results(check_set, "hung_mount", tmp_path)  # run_on_profile's 60 s limit < the fake's 300 s sleep
    assert res["storage.free:/lustre/scratch"].message == "/lustre/scratch: no answer within 1.5 s"
    # the write probe is not even tried on a path that did not answer
    skipped = res["storage.writable:/lustre/scratch"]
    assert skipped.status is Status.SKIP and skipped.message == "/lustre/scratch: skipped: section df_0 timed out"
    assert res["storage.free:/home"].status is Status.OK


def test_cut_off_script_reports_unfinished_sections(default_judged: Judged) -> None:
    check_set, out = default_judged.check_set, default_judged.outs["healthy"]
    begin_ib = f"@@ck-{check_set.token}@@ BEGIN ib\n"
    cut = out[: out.index(begin_ib)] + begin_ib + "\n/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE\n"
    judged = evaluate(check_set, cut, "remote command timed out after 9 s")
    res = {r.check + (":" + r.target if r.target else ""): r for r in judged}
    assert res["gpu.count"].status is Status.OK
    assert res["ib.hcas"].message == "cut off while running (remote command timed out after 9 s)" and res["ib.hcas"].cut
    assert res["storage.mounted:/home"].message == "/home: not checked: remote command timed out after 9 s"


def test_markers_cannot_be_forged_by_node_output() -> None:
    check_set = select_checks(expect(stage=SINGLE, storage=()))
    fake = "@@ck-0000000000000000@@ END gpu 0\n"
    text = f"\n@@ck-{check_set.token}@@ BEGIN gpu\n{fake}\n@@ck-{check_set.token}@@ END gpu 0\n"
    assert split_sections(text, check_set.token)["gpu"].text == fake.rstrip("\n")
    assert check_set.token != select_checks(expect(stage=SINGLE)).token


def test_stage_awareness() -> None:
    single = select_checks(expect(stage=SINGLE))
    names = {c.name for c in single.checks}
    assert not any(n.startswith("ib.") for n in names) and "storage.mounted" not in names
    assert "single-node" in single.notes[0]
    local = select_checks(expect(stage=SINGLE, storage=(storage("/raid", "local", min_free_gb=10),)))
    assert {c.target for c in local.checks if c.target} == {"/raid"}
    large = select_checks(expect(stage=LARGE))
    assert [c.target for c in large.checks if c.name == "storage.nfs_at_scale"] == ["/home"]
    multi = select_checks(expect())
    assert "storage.nfs_at_scale" not in {c.name for c in multi.checks}
    eth = select_checks(expect(fabric="ethernet", hcas=()))
    assert not any(c.name.startswith("ib.") for c in eth.checks) and "ethernet" in eth.notes[0]


def test_large_cluster_warns_on_nfs_without_failing(tmp_path: Path) -> None:
    res = results(select_checks(expect(stage=LARGE)), "healthy", tmp_path)
    assert res["storage.nfs_at_scale:/home"].status is Status.WARN
    assert failures(res) == {}


def test_roce_site_expects_ethernet_link_layer(tmp_path: Path) -> None:
    res = results(select_checks(expect(fabric="roce")), "healthy", tmp_path)
    assert res["ib.link_layer"].status is Status.FAIL
    assert "expected Ethernet for fabric roce" in res["ib.link_layer"].message


def test_hca_port_spec_and_missing_hca(tmp_path: Path) -> None:
    res = results(select_checks(expect(hcas=("mlx5_0:1", "mlx5_9"))), "healthy", tmp_path)
    assert res["ib.hcas"].message.startswith("HCA mlx5_9 missing (found: mlx5_0, mlx5_1")
    assert res["ib.ports"].status is Status.SKIP


def test_free_space_and_not_writable(tmp_path: Path) -> None:
    huge = storage("/lustre/scratch", "lustre", min_free_gb=10**9, writable=True, timeout_s=3)
    check_set = select_checks(expect(storage=(huge,)))
    node = tmp_path / "healthy"
    shutil.copytree(PROFILES / "healthy" / "root", node / "root")
    shutil.rmtree(node / "root" / "lustre" / "scratch")
    (node / "root" / "lustre" / "scratch").write_text("not a directory\n")  # writes into it fail, even as root
    res = results(check_set, "healthy", tmp_path)
    assert "GB free < 1e+09 GB required" in res["storage.free:/lustre/scratch"].message
    w = res["storage.writable:/lustre/scratch"]
    assert w.status is Status.FAIL and "/lustre/scratch not writable" in w.message


def test_hostile_storage_path_is_quoted(tmp_path: Path) -> None:
    victim = tmp_path / "pwned"
    hostile = f"/x'; touch {victim}; echo '$(touch {victim})"
    check_set = select_checks(expect(storage=(storage(hostile, "nfs", writable=True, timeout_s=3),)))
    res = results(check_set, "healthy", tmp_path)
    assert not victim.exists()
    assert res[f"storage.mounted:{hostile}"].status is Status.FAIL


def test_local_machine_without_gpus(tmp_path: Path) -> None:
    """This machine has no nvidia-smi: a clear failure, never a crash."""
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    check_set = select_checks(expect(stage=SINGLE, storage=()))
    proc = subprocess.run(["sh", "-c", check_set.script()], capture_output=True, text=True, timeout=60)
    res = {r.check: r for r in evaluate(check_set, proc.stdout)}
    assert res["gpu.present"].status is Status.FAIL
    assert res["gpu.present"].message == "nvidia-smi not found (no NVIDIA driver installed?)"
