"""The remote script and its evaluation, run with a real shell against the lab's node profiles.

No SSH here: the script is executed locally with the profile's ``bin`` first on PATH and its
``root`` as ``CLUSTERKIT_SYSROOT``, exactly as the lab's ForceCommand does on a virtual node.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from clusterkit.config.schema import Storage
from clusterkit.nodes.script import split_sections
from clusterkit.preflight.catalogue import Expectations, StorageExpect, select_checks
from clusterkit.preflight.engine import (
    LARGE,
    MULTI,
    SINGLE,
    CheckResult,
    CheckSet,
    Status,
    evaluate,
)

PROFILES = Path(__file__).resolve().parents[1] / "sshlab" / "profiles"


def storage(path: str, kind: str, **kw: Any) -> StorageExpect:
    """A site's ``storage:`` entry as the checks get it (``writable``: used for checkpoints)."""
    use = ["checkpoints"] if kw.pop("writable", False) else []
    return StorageExpect.from_config(Storage(path=path, type=kind, use=use, **kw))


LUSTRE = storage("/lustre/scratch", "lustre", min_free_gb=0.001, writable=True, timeout_s=1.5)
HOME = storage("/home", "nfs")


def expect(stage: str = MULTI, **kw) -> Expectations:  # type: ignore[no-untyped-def]
    base = dict(stage=stage, gpus_per_node=8, gpu_model="H100", driver_min="535.104", cuda_min="12.4",
                fabric="infiniband", hcas=tuple(f"mlx5_{i}" for i in range(8)), port_rate_gbps=400,
                storage=(LUSTRE, HOME), command_timeout_s=9)
    base.update(kw)
    return Expectations(**base)  # type: ignore[arg-type]


def run_on_profile(check_set: CheckSet, profile: str, tmp_path: Path) -> tuple[str, int]:
    """Run the set's script as a lab node with ``profile`` would; returns (stdout, rc)."""
    node = tmp_path / profile
    if not node.exists():
        shutil.copytree(PROFILES / profile / "root", node / "root", symlinks=True)
    env = dict(os.environ, PATH=f"{PROFILES / profile / 'bin'}:{os.environ['PATH']}",
               CLUSTERKIT_SYSROOT=str(node / "root"))
    proc = subprocess.run(["sh", "-c", check_set.script()], env=env, capture_output=True, text=True, timeout=60)
    return proc.stdout, proc.returncode


def judge(check_set: CheckSet, out: str) -> dict[str, CheckResult]:
    return {r.check + (":" + r.target if r.target else ""): r for r in evaluate(check_set, out)}


def results(check_set: CheckSet, profile: str, tmp_path: Path) -> dict[str, CheckResult]:
    out, _ = run_on_profile(check_set, profile, tmp_path)
    return judge(check_set, out)


class Judged(NamedTuple):
    """One check set and its results on several profiles (:func:`judge_profiles`)."""

    check_set: CheckSet
    by_profile: dict[str, dict[str, CheckResult]]
    outs: dict[str, str]   # each profile's script output


def judge_profiles(check_set: CheckSet, profiles: Sequence[str], tmp_path: Path) -> Judged:
    """:func:`results` on each profile, four scripts at a time: a script mostly waits (2 s between
    its two reads of the error counters), so side by side they take the time of a few."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(lambda profile: run_on_profile(check_set, profile, tmp_path)[0], profiles))
    return Judged(check_set, {profile: judge(check_set, out) for profile, out in zip(profiles, outs, strict=True)},
                  dict(zip(profiles, outs, strict=True)))


@pytest.fixture(scope="module")
def default_judged(tmp_path_factory: pytest.TempPathFactory) -> Judged:
    """The default expectations (:func:`expect`) judged once on the profiles the tests below read."""
    return judge_profiles(select_checks(expect()), ["healthy", "gpu_missing", "ib_down", "old_driver", "no_lustre",
                                                    "ecc_errors", "garbage_smi"], tmp_path_factory.mktemp("profiles"))


def failures(res: dict[str, CheckResult]) -> dict[str, str]:
    return {k: r.message for k, r in res.items() if r.status is Status.FAIL}


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


DATA = Path(__file__).resolve().parents[1] / "data" / "preflight"


def node_output(check_set: CheckSet, sections: dict[str, tuple[str, str]]) -> str:
    """Script output as a node would print it: ``{section: (text, rc)}`` between the markers."""
    m = f"@@ck-{check_set.token}@@"
    return "".join(f"\n{m} BEGIN {name}\n{text}\n{m} END {name} {rc}\n" for name, (text, rc) in sections.items())


def gpu_results(capture: str, rc: str = "0", **kw) -> dict[str, CheckResult]:  # type: ignore[no-untyped-def]
    check_set = select_checks(expect(stage=SINGLE, storage=(), **kw))
    text = (DATA / capture).read_text(errors="replace")
    out = node_output(check_set, {"gpu": (text, rc), "cuda": ((DATA / "nvidia_smi_version.txt").read_text(), "0")})
    return {r.check: r for r in evaluate(check_set, out)}


def test_mig_persistence_off_and_ecc_on_a100_capture() -> None:
    res = gpu_results("nvidia_smi_query_a100_mig.csv", gpus_per_node=4, gpu_model="A100")
    assert res["gpu.count"].status is Status.OK and res["gpu.model"].status is Status.OK
    assert (res["gpu.mig"].status, res["gpu.mig"].message) == (Status.FAIL, "MIG enabled on GPU 0")
    persistence = res["gpu.persistence"]
    assert (persistence.status, persistence.message) == (Status.WARN, "persistence mode off on GPU 2")
    assert res["gpu.ecc"].message == "uncorrected ECC errors (GPU 2: 2)"
    assert res["gpu.driver"].message == "driver 535.104.05"


def test_err_cell_fails_ecc_and_na_passes() -> None:
    assert gpu_results("nvidia_smi_query_err.csv", gpus_per_node=2)["gpu.ecc"].message == \
        "ECC counter unreadable (ERR!) on GPU 1"
    na = gpu_results("nvidia_smi_query_consumer_na.csv", gpus_per_node=2, gpu_model="RTX", driver_min=None)
    assert (na["gpu.ecc"].status, na["gpu.ecc"].message) == (Status.OK, "ECC not reported by these GPUs")
    assert na["gpu.model"].message == "GPU model Tesla T4, expected RTX"
    assert na["gpu.driver"].status is Status.FAIL  # two different drivers on one node


@pytest.mark.parametrize(
    "capture,rc,message",
    [
        ("nvidia_smi_no_devices.txt", "6", "nvidia-smi: No devices were found"),
        ("nvidia_smi_driver_failed.txt", "9", "nvidia-smi failed: NVIDIA-SMI has failed because it couldn't "
                                              "communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
                                              "driver is installed and running."),
        ("nvidia_smi_bad_field.txt", "2", "could not parse nvidia-smi --query-gpu: line 1 has 1 fields, expected 8"),
    ],
)
def test_whole_node_gpu_failures(capture: str, rc: str, message: str) -> None:
    res = gpu_results(capture, rc)
    assert (res["gpu.present"].status, res["gpu.present"].message) == (Status.FAIL, message)
    assert {res[k].status for k in ("gpu.count", "gpu.driver", "gpu.ecc", "gpu.cuda")} == {Status.SKIP}


def test_hung_nvidia_smi_is_a_timeout_and_cuda_section_is_skipped() -> None:
    check_set = select_checks(expect(stage=SINGLE, storage=()))
    out = node_output(check_set, {"gpu": ("", "124"), "cuda": ("skipped: section gpu timed out", "skip")})
    res = {r.check: r for r in evaluate(check_set, out)}
    assert res["gpu.present"].message == "no answer within 3 s"
    assert res["gpu.count"].status is Status.SKIP


def test_roce_node_passes_a_roce_site_and_fails_an_ib_one(tmp_path: Path) -> None:
    roce = dict(gpus_per_node=4, gpu_model="A100", hcas=("mlx5_0", "mlx5_1"), port_rate_gbps=200)
    ok = results(select_checks(expect(fabric="roce", **roce)), "roce", tmp_path)
    assert failures(ok) == {} and ok["ib.link_layer"].message == "link layer Ethernet"
    bad = results(select_checks(expect(fabric="infiniband", **roce)), "roce", tmp_path)
    assert failures(bad) == {"ib.link_layer": "link layer mlx5_0 port 1 Ethernet, mlx5_1 port 1 Ethernet, "
                                              "expected InfiniBand for fabric infiniband"}


def test_committed_profiles_match_their_generator(tmp_path: Path) -> None:
    """tests/sshlab/profiles is generated by make_profiles.py: regenerate after editing it."""
    from tests.preflight import make_profiles

    make_profiles.main(tmp_path)
    for name in make_profiles.PROFILE_NODES:
        made = {p.relative_to(tmp_path / name): p for p in (tmp_path / name).rglob("*") if p.is_file()}
        committed = {p.relative_to(PROFILES / name): p for p in (PROFILES / name).rglob("*") if p.is_file()}
        assert made.keys() == committed.keys(), name
        for rel, path in made.items():
            assert path.read_bytes() == committed[rel].read_bytes(), f"{name}/{rel}"
            assert path.stat().st_mode & 0o111 == committed[rel].stat().st_mode & 0o111, f"{name}/{rel}"


def standin_nvidia_smi(bindir: Path, version: str | None, header: str) -> None:
    """A stand-in ``nvidia-smi`` (no NVIDIA driver here) printing captured driver-610 text:
    ``--version`` prints ``version`` (or fails as drivers before 525 do when it is None), no
    argument prints the table ``header``, ``--query-gpu`` the 8 x H100 capture."""
    bindir.mkdir(parents=True, exist_ok=True)
    query = DATA / "nvidia_smi_query_h100x8.csv"
    ver = f"cat '{DATA / version}'" if version else \
        "echo \"Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\"; exit 2"
    tool = bindir / "nvidia-smi"
    tool.write_text("#!/bin/sh\n"
                    f'case "$1" in\n--version) {ver} ;;\n--query-gpu=*) cat \'{query}\' ;;\n'
                    f"*) cat '{DATA / header}' ;;\nesac\n")
    tool.chmod(0o755)


@pytest.mark.parametrize("version", ["nvidia_smi_version_610.txt", None])
def test_driver_610_cuda_umd_version_end_to_end(tmp_path: Path, version: str | None) -> None:
    """The real preflight script over a stand-in nvidia-smi printing driver 610's captured text:
    ``CUDA UMD version`` from ``--version``, else from the table header."""
    standin_nvidia_smi(tmp_path / "bin", version, "nvidia_smi_header_610.txt")
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    for cuda_min, status, message in [("13.0", Status.OK, "CUDA 13.3"),
                                      ("13.4", Status.FAIL, "CUDA 13.3 < 13.4 required")]:
        check_set = select_checks(expect(stage=SINGLE, storage=(), cuda_min=cuda_min))
        proc = subprocess.run(["sh", "-c", check_set.script()], env=env, capture_output=True, text=True,
                              timeout=60)
        res = {r.check: r for r in evaluate(check_set, proc.stdout)}
        assert (res["gpu.cuda"].status, res["gpu.cuda"].message) == (status, message)
        assert res["gpu.count"].status is Status.OK


def ib_results(capture: str, hcas: tuple[str, ...]) -> dict[str, CheckResult]:
    check_set = select_checks(expect(stage=MULTI, storage=(), hcas=hcas, port_rate_gbps=200))
    out = node_output(check_set, {"ib": ((DATA / capture).read_text(), "0")})
    return {r.check: r for r in evaluate(check_set, out)}


def test_ibstat_panic_reports_the_named_device_missing_and_judges_the_rest() -> None:
    res = ib_results("ibstat_partial_ibpanic.txt", ("mlx5_7", "mlx5_8"))
    assert (res["ib.hcas"].status, res["ib.hcas"].message) == (
        Status.FAIL, "HCA mlx5_8 missing (found: mlx5_7; ibpanic: main: stat of IB device 'mlx5_8' failed: "
                     "No such file or directory)")
    ok = ib_results("ibstat_partial_ibpanic.txt", ("mlx5_7",))
    assert (ok["ib.hcas"].status, ok["ib.hcas"].message) == (
        Status.OK, "HCAs mlx5_7 present (ibstat could not read mlx5_8)")
    assert {ok[k].status for k in ("ib.ports", "ib.rate", "ib.link_layer")} == {Status.OK}


@pytest.mark.skipif(Path("/sys/class/infiniband").exists(), reason="this machine has an InfiniBand sysfs tree")
def test_ibstat_panic_end_to_end_through_the_script(tmp_path: Path) -> None:
    """The real preflight script with a stand-in ``ibstat`` (no HCA here) that prints the captured
    blocks on stdout, the ``ibpanic`` line on stderr and exits 255, as libibumad's IBPANIC does."""
    lines = (DATA / "ibstat_partial_ibpanic.txt").read_text().splitlines(keepends=True)
    (tmp_path / "out.txt").write_text("".join(lines[:-1]))
    (tmp_path / "err.txt").write_text(lines[-1])
    tool = tmp_path / "bin" / "ibstat"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\ncat '{tmp_path / 'out.txt'}'\ncat '{tmp_path / 'err.txt'}' >&2\nexit 255\n")
    tool.chmod(0o755)
    check_set = select_checks(expect(stage=MULTI, storage=(), hcas=("mlx5_7", "mlx5_8"), port_rate_gbps=200))
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERKIT_SYSROOT"}
    env["PATH"] = f"{tool.parent}:{os.environ['PATH']}"
    proc = subprocess.run(["sh", "-c", check_set.script()], env=env, capture_output=True, text=True, timeout=60)
    res = {r.check: r for r in evaluate(check_set, proc.stdout)}
    assert res["ib.hcas"].status is Status.FAIL
    assert res["ib.hcas"].message.startswith("HCA mlx5_8 missing (found: mlx5_7; ibpanic: main: stat of IB device")


def test_probe_facts_keep_the_ports_and_name_the_unread_device() -> None:
    """``sites init --probe``/``drift`` read the same section: the ports stay, the device is a problem."""
    from clusterkit.nodes.facts import node_facts
    from clusterkit.nodes.script import new_token

    token = new_token()
    m = f"@@ck-{token}@@"
    text = (DATA / "ibstat_partial_ibpanic.txt").read_text()
    nf = node_facts("gpu01", f"\n{m} BEGIN ib\n{text}\n{m} END ib 255\n", token)
    assert nf.ib is not None and nf.ib.hcas == ["mlx5_7"]
    assert "ib: ibstat could not read mlx5_8 (ibpanic: main: stat of IB device 'mlx5_8' failed: " \
           "No such file or directory)" in nf.problems


def _logging_timeout(tmp_path: Path) -> tuple[Path, Path]:
    """A directory whose ``timeout`` is a stand-in wrapper that logs its arguments to the returned
    log, then execs the real timeout(1)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "timeout.log"
    real = shutil.which("timeout")
    assert real is not None
    wrapper = bindir / "timeout"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    return bindir, log


def test_inline_sections_run_without_timeout_and_stay_apart(tmp_path: Path) -> None:
    """Sections that only read kernel tables run in a subshell of the script (no timeout(1),
    no sh): their exit status, output and variables stay theirs, and timed sections around
    them still run under timeout(1).  The proof that timeout(1) ran: a PATH whose first
    ``timeout`` is a wrapper (named as a stand-in) that logs its call, then runs the real one."""
    from clusterkit.nodes.script import Section, build_script

    bindir, log = _logging_timeout(tmp_path)
    sections = [Section("a", "ck_leak=1; echo one; exit 3", 5.0, inline=True),
                Section("b", 'echo "two ${ck_leak:-unset}"', 5.0),
                Section("c", 'cat "$CK_ROOT/proc/self/limits" >/dev/null && echo three', 5.0, inline=True)]
    script = build_script(sections, "t0k3n")
    assert "ck_section a 0 " in script and "ck_section b 5 " in script
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "CLUSTERKIT_SYSROOT": ""}
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60).stdout
    got = split_sections(out, "t0k3n")
    assert (got["a"].text.strip(), got["a"].rc) == ("one", "3")
    assert (got["b"].text.strip(), got["b"].rc) == ("two unset", "0")
    assert (got["c"].text.strip(), got["c"].rc) == ("three", "0")
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith("-k 2 5 sh -c echo"), calls


def test_simple_sections_run_under_timeout_without_sh(tmp_path: Path) -> None:
    """A section that is one simple command is expanded by the script's shell and run by
    timeout(1) itself: a path with a space and a quote stays one argument, a section that hangs
    still ends with timeout's 124 (and the section after it that depends on it is skipped), and
    no ``sh -c`` is started for it.  Run by dash (``sh``), as the preflight tests run the script,
    and by bash, as the transports do; timeout(1) is logged by a stand-in wrapper as above."""
    from clusterkit.nodes.script import Section, build_script

    bindir, log = _logging_timeout(tmp_path)
    odd = tmp_path / "root" / "it's a dir"
    odd.mkdir(parents=True)
    (odd / "f").write_text("x")
    sections = [Section("ls", "ls -1 -- \"$CK_ROOT\"/\"it's a dir\"", 5.0, simple=True),
                Section("hang", "sleep 30", 0.5, simple=True),
                Section("after", "echo never", 5.0, unless_timed_out="hang", simple=True)]
    script = build_script(sections, "t0k3n")
    for shell in ("sh", "bash"):
        log.write_text("")
        env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "CLUSTERKIT_SYSROOT": str(tmp_path / "root")}
        out = subprocess.run([shell, "-c", script], env=env, capture_output=True, text=True, timeout=60).stdout
        got = split_sections(out, "t0k3n")
        assert (got["ls"].text.strip(), got["ls"].rc) == ("f", "0"), (shell, out)
        assert got["hang"].timed_out and got["hang"].rc == "124", (shell, out)
        assert (got["after"].text, got["after"].rc) == ("skipped: section hang timed out", "skip"), (shell, out)
        calls = log.read_text().splitlines()
        assert calls == [f"-k 2 5 ls -1 -- {odd}", "-k 2 0.5 sleep 30"], (shell, calls)
