"""The hostile-input corpus: site files and command lines written as an attacker (or a user on a
bad day) would, each with its expected outcome.

* ``sites/*.yaml``: the first line says what must happen when the file is rendered:
  ``# expect: 2 | TEXT`` (a one-line error containing TEXT, exit 2, no run directory),
  ``# expect: ok`` (renders), or ``# expect: renders | ARGS`` (renders with ARGS, and the job
  script's prologue then runs against stand-ins for srun/scontrol/module and the launchers).
* ``argv.yaml``: command lines with their exit code and error text.
* Cases that cannot be stored as plain files (over 1 MiB, 5,000 levels, a FIFO, /dev/zero,
  not UTF-8) are built here.

Every case runs in a fresh directory, and hostile content tries to create ``pwned*`` files
there: none may appear, whatever the outcome.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import assert_one_line_error, shared_site
from tests.render.test_execute import execute

HERE = Path(__file__).parent
SITES = sorted((HERE / "sites").glob("*.yaml"))
ARGV = yaml.safe_load((HERE / "argv.yaml").read_text())
BASE = 'name: h\nnodes: {nodelist: "n[1-2]", gpus_per_node: 8}\n'


def expectation(path: Path) -> tuple[str, str]:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name}: the first line must say what to expect"
    kind, _, rest = first[len("# expect: "):].partition(" | ")
    return kind.strip(), rest


def assert_no_marker(where: Path) -> None:
    assert not list(where.rglob("pwned*")), "hostile input ran a command"


@pytest.mark.parametrize("case", SITES, ids=[p.stem for p in SITES])
def test_site_case(ck, tmp_path: Path, case: Path) -> None:
    kind, rest = expectation(case)
    site = tmp_path / case.name
    shutil.copy(case, site)
    out = tmp_path / "run"
    # a rendered case runs on the srun stand-in, which runs launch steps, not the in-job preflight
    extra = [*rest.split(), "--set", "preflight_in_job=false"] if kind == "renders" else []
    result = ck("render", "--site", str(site), *extra, "--out", str(out),
                "--", "python", "train.py", "$(touch pwned-arg)", cwd=tmp_path)
    if kind == "2":
        assert_one_line_error(result, 2, rest)
        assert not out.exists(), "nothing may be written for a refused site"
    else:
        assert result.code == 0, result.err
    if kind == "renders":
        execute(out, tmp_path)
    assert_no_marker(tmp_path)


def _big(tmp: Path) -> str:
    return BASE + "description: '" + "x" * (1024 * 1024) + "'\n"


GENERATED: dict[str, tuple[Callable[[Path], str], str]] = {
    "file-over-1MiB": (_big, "larger than 1024 KiB (the limit for a site file)"),
    "nesting-5000": (lambda t: BASE + "description: " + "[" * 5000 + "]" * 5000 + "\n",
                     "nesting deeper than 64 levels"),
    "nesting-65-block": (lambda t: BASE + "".join(f"{'  ' * i}k{i}:\n" for i in range(65)) + "  " * 65 + "v: 1\n",
                         "nesting deeper than 64 levels"),
    "not-utf8": (lambda t: BASE + "description: caf\xe9\n", "not UTF-8 text"),
}


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_site_case(ck, tmp_path: Path, name: str) -> None:
    make, needle = GENERATED[name]
    site = tmp_path / f"{name}.yaml"
    text = make(tmp_path)
    site.write_bytes(text.encode("latin-1") if name == "not-utf8" else text.encode())
    assert_one_line_error(ck("sites", "validate", str(site), cwd=tmp_path), 2, needle)


def test_extends_to_a_fifo_or_dev_zero_fails_fast(ck, tmp_path: Path) -> None:
    """Run as a process with a timeout: before the fix a FIFO hung and /dev/zero ate memory."""
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    (tmp_path / "a.yaml").write_text("extends: fifo.yaml\n" + BASE)
    (tmp_path / "b.yaml").write_text("extends: zero.yaml\n" + BASE)
    (tmp_path / "c.yaml").write_text("extends: /dev/zero\n" + BASE)

    def validate(name: str) -> Any:
        return ck.proc("sites", "validate", name, cwd=tmp_path, timeout=60)

    assert_one_line_error(validate("a.yaml"), 2, "fifo.yaml: not a regular file")
    assert_one_line_error(validate("b.yaml"), 2, "must be a .yaml or .yml site file")
    assert_one_line_error(validate("c.yaml"), 2, "must be a .yaml or .yml site file")
    assert_one_line_error(ck.proc("sites", "validate", "fifo.yaml", cwd=tmp_path, timeout=60), 2, "not a regular file")


def test_extends_never_echoes_a_file_that_is_not_a_site_file(ck, tmp_path: Path) -> None:
    secret = "root:$6$SECRETHASH:19000:0:99999:7:::"
    (tmp_path / "shadow").write_text(secret + "\n")
    (tmp_path / "s.yaml").write_text("extends: shadow\n" + BASE)
    result = ck("sites", "validate", str(tmp_path / "s.yaml"), cwd=tmp_path)
    assert_one_line_error(result, 2, "must be a .yaml or .yml site file")
    assert "SECRETHASH" not in result.err + result.out
    (tmp_path / "link.yaml").symlink_to(tmp_path / "shadow")   # a .yaml name pointing elsewhere
    (tmp_path / "t.yaml").write_text("extends: link.yaml\n" + BASE)
    result = ck("sites", "validate", str(tmp_path / "t.yaml"), cwd=tmp_path)
    assert_one_line_error(result, 2, "must be a .yaml or .yml site file")
    assert "SECRETHASH" not in result.err + result.out


def test_merge_keys_keep_line_numbers_and_explicit_keys_win(ck, tmp_path: Path) -> None:
    shutil.copy(HERE / "sites" / "merge-keys.yaml", tmp_path / "m.yaml")
    result = ck("sites", "show", str(tmp_path / "m.yaml"), "--json", cwd=tmp_path)
    assert result.code == 0, result.err
    nodes = json.loads(result.out)["site"]["nodes"]
    assert (nodes["gpus_per_node"], nodes["nodelist"]) == (8, "n[1-2]")
    # a bad value inherited through '<<' is reported at the anchor's line, in the key's path
    bad = tmp_path / "bad.yaml"
    bad.write_text("x-d: &d\n  cpus_per_node: 0\n  nodelist: n1\nname: h\nnodes:\n  <<: *d\n  gpus_per_node: 8\n")
    assert_one_line_error(ck("sites", "validate", str(bad), cwd=tmp_path), 2, "bad.yaml:2: nodes.cpus_per_node")


def test_unquoted_time_is_twelve_hours(ck, tmp_path: Path) -> None:
    shutil.copy(HERE / "sites" / "time-sexagesimal.yaml", tmp_path / "t.yaml")
    result = ck("render", "--site", str(tmp_path / "t.yaml"), "--out", str(tmp_path / "r"), "--", "python", "t.py",
                cwd=tmp_path)
    assert result.code == 0, result.err
    assert "#SBATCH --time=12:00:00\n" in (tmp_path / "r" / "job.sbatch").read_text()


def _argv(case: dict[str, Any], tmp: Path) -> list[str]:
    return [a.replace("{LONG}", "a" * 300).replace("{TMP}", str(tmp)) for a in case["argv"]]


@pytest.mark.parametrize("case", ARGV, ids=[f"{i:02d}-{c['argv'][0]}" for i, c in enumerate(ARGV)])
def test_argv_case(ck, tmp_path: Path, case: dict[str, Any]) -> None:
    before = set(tmp_path.iterdir())
    result = ck(*_argv(case, tmp_path), cwd=tmp_path)
    assert_one_line_error(result, case["exit"], case["error"])
    assert set(tmp_path.iterdir()) == before, "a refused command wrote something"
    assert "NaN" not in result.out and "Infinity" not in result.out


def test_sites_list_survives_the_whole_corpus(ck, tmp_path: Path) -> None:
    """`sites list` loads every site on the search path: one hostile file must stay its own problem."""
    configs = tmp_path / "site_configs"
    configs.mkdir()
    for case in SITES:
        shutil.copy(case, configs / case.name)
    for name, (make, _) in GENERATED.items():
        text = make(tmp_path)
        (configs / f"{name}.yaml").write_bytes(text.encode("latin-1") if name == "not-utf8" else text.encode())
    os.mkfifo(configs / "fifo.yaml")
    (configs / "zero.yaml").symlink_to("/dev/zero")
    result = ck.proc("sites", "list", "--json", cwd=tmp_path, timeout=120, env={"CLUSTERKIT_SITES": ""})
    assert result.code == 0, result.err
    rows = {r["name"]: r for r in json.loads(result.out) if r["from"] == "./site_configs"}
    plan_time = {"sbatch-newline-value", "partition-newline"}   # valid sites; the plan refuses them
    for case in SITES:
        kind, _ = expectation(case)
        assert rows[case.stem]["valid"] is (kind != "2" or case.stem in plan_time), case.stem
    assert all(not rows[name]["valid"] for name in GENERATED)
    assert_no_marker(tmp_path)


@pytest.mark.parametrize("value", ["$(touch pwned)", "a b", "x;touch pwned", "`touch pwned`", "'q'", "%n"])
def test_pdsh_env_values_that_deepspeed_would_half_quote_are_refused(ck, tmp_path: Path, value: str) -> None:
    """.deepspeed_env is read back by DeepSpeed and pasted into `export K=V; ...` on every node."""
    site = tmp_path / "p.yaml"
    site.write_text('name: p\nnodes: {nodelist: "n[1-2]", gpus_per_node: 8}\nstorage: [{path: /tmp, type: nfs}]\n'
                    + "nccl:\n  env: {NCCL_SOCKET_IFNAME: " + json.dumps(value) + "}\n")
    result = ck("render", "--site", str(site), "--stage", "multi-node", "--launcher", "deepspeed",
                "--set", "ds_launcher=pdsh", "--set", "max_restarts=0", "--out", str(tmp_path / "run"),
                "--", "python", "t.py", cwd=tmp_path)
    assert_one_line_error(result, 2, "ds_launcher=pdsh: environment value NCCL_SOCKET_IFNAME=")
    assert not (tmp_path / "run").exists()


def test_pdsh_deepspeed_env_with_safe_values_renders(ck, tmp_path: Path) -> None:
    site = shared_site(tmp_path / "sites", "ib-h100", tmp_path)
    result = ck("render", "--site", str(site), "--stage", "multi-node", "--launcher", "deepspeed",
                "--set", "ds_launcher=pdsh", "--set", "container=false", "--set", "max_restarts=0",
                "--out", str(tmp_path / "run"), "--", "python", "t.py", "--lr", "1e-4")
    assert result.code == 0, result.err
    lines = (tmp_path / "run" / ".deepspeed_env").read_text().splitlines()
    assert "NCCL_IB_HCA==mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7" in lines
    assert all(len(line.split("=", 1)) == 2 and " " not in line for line in lines)
    script = (tmp_path / "run" / "job.sbatch").read_text()
    assert 'export DS_ENV_FILE="$ck_ds_env"' in script     # the launcher's setup line: its per-attempt copy
    assert "\n  srun " not in script and "exec deepspeed" in script          # once, on the batch host


def test_plan_json_at_the_largest_accepted_numbers_is_finite_json(ck, tmp_path: Path) -> None:
    """Every input at its upper bound at once: the figures are big, but JSON numbers, never
    Infinity or NaN (which strict JSON readers refuse)."""
    import json
    import math

    big = "1000000000"
    result = ck("plan", "--site", "ib-h100", "--model-params", "1e16", "--seq-len", big, "--micro-batch", big,
                "--hidden-size", big, "--layers", big, "--vocab-size", big, "--buffer-factor", "100",
                "--hours", "1e6", "--json", cwd=tmp_path)
    assert result.code == 0, result
    assert "Infinity" not in result.out and "NaN" not in result.out

    def finite(v: Any) -> bool:
        if isinstance(v, float):
            return math.isfinite(v)
        if isinstance(v, dict):
            return all(finite(x) for x in v.values())
        if isinstance(v, list):
            return all(finite(x) for x in v)
        return True

    assert finite(json.loads(result.out))
