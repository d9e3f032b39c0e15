"""What is particular to a launcher travels in its ``Launch``: no layer outside
``job/launchers/`` tests a launcher's name."""

from __future__ import annotations

import re

import pytest

from clusterkit.job import launchers
from clusterkit.job.launchers import Context
from clusterkit.job.settings import build as settings
from clusterkit.vocab import LAUNCHERS
from tests.conftest import REPO

PLAN_AND_RENDER = ("plan.py", "plan_checks.py", "shares.py", "render.py", "script_parts.py", "templating.py")
DIRECTIVES = ("directives.py", "slurm/directives.py", "local/directives.py")
OUTSIDE = [*(REPO / "toolkit/clusterkit/job" / name for name in PLAN_AND_RENDER),
           *(REPO / "toolkit/clusterkit/scheduler" / name for name in DIRECTIVES),
           REPO / "toolkit/clusterkit/actions.py", *sorted((REPO / "templates").glob("job*.j2"))]
NAMED = re.compile(r"""(["'])(%s)\1|launcher\s*(==|!=)""" % "|".join(LAUNCHERS))  # noqa: UP031


@pytest.mark.parametrize("path", OUTSIDE, ids=[p.name for p in OUTSIDE])
def test_no_launcher_name_outside_the_launchers(path) -> None:  # type: ignore[no-untyped-def]
    found = [f"{path.name}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
             if NAMED.search(line)]
    assert found == []


def ctx(slurm: bool = True, nnodes: int = 2, **values: object) -> Context:
    return Context(nnodes=nnodes, gpus_per_node=2, command=("python", "t.py"), settings=settings(dict(values)),
                   stage="multi-node", slurm=slurm, hosts=("n1", "n2"), run_dir="/r", site_hosts=("n1", "n2"))


def test_deepspeed_runner_ignores_the_warning_on_slurm_only() -> None:
    assert launchers.get("deepspeed")(ctx()).term == "ignore"
    assert launchers.get("deepspeed")(ctx(slurm=False, nnodes=1)).term == "default"
    assert {launchers.get(n)(ctx()).term for n in ("torchrun", "srun", "accelerate")} == {"default"}


def test_pdsh_deepspeed_carries_its_env_file_and_its_checks() -> None:
    pdsh = launchers.get("deepspeed")(ctx(ds_launcher="pdsh", max_restarts=0))
    assert pdsh.mode == "once" and pdsh.name == "deepspeed ds_launcher=pdsh"
    assert pdsh.templated == {".deepspeed_env": "deepspeed_env.j2"}
    assert 'export DS_ENV_FILE="$ck_ds_env"' in pdsh.setup     # the per-attempt copy with the run-time values
    assert pdsh.check_env is not None
    no_ssh = launchers.get("deepspeed")(ctx())
    assert no_ssh.templated == {} and no_ssh.setup == () and no_ssh.check_env is None and no_ssh.name == "deepspeed"


def test_horovod_host_list_is_built_in_the_job_on_slurm() -> None:
    setup = launchers.get("horovod")(ctx()).setup
    assert any("CK_HOSTS_SLOTS=" in line and ":2/" in line for line in setup) and "export CK_HOSTS_SLOTS" in setup
    assert launchers.get("horovod")(ctx(slurm=False, nnodes=1)).setup == ()


def test_inputs_read_at_render_time() -> None:
    [wanted] = launchers.inputs("deepspeed", ["python", "t.py", "--deepspeed_config=ds.json"])
    assert (wanted.path, wanted.what, wanted.kind) == ("ds.json", "deepspeed: --deepspeed_config ds.json",
                                                       "DeepSpeed config")
    assert launchers.inputs("deepspeed", ["python", "t.py"]) == ()
    assert launchers.inputs("torchrun", ["python", "t.py", "--deepspeed_config=ds.json"]) == ()
