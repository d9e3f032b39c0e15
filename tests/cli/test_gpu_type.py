"""A typed GPU request (issue 40): ``--set gpu_type=TYPE`` writes ``#SBATCH --gpus-per-node=TYPE:N``,
the one form clusterkit asks for GPUs in; ``--sbatch gres=gpu:...`` beside it is refused, other
GRES are not.  The testbed's typed-GRES check is tests/slurm/test_sites_admin.py."""

from __future__ import annotations

import json

import pytest

from tests.conftest import assert_one_line_error


def _script(ck, *args: str) -> str:
    result = ck("render", "--site", "testbed", "--nodes", "2", "--gpus-per-node", "4", "--json", *args,
                "--", "python", "train.py")
    assert result.code == 0, result.err
    return str(json.loads(result.out)["job_sbatch"])


def test_typed_and_untyped_requests(ck) -> None:
    assert "\n#SBATCH --gpus-per-node=4\n" in _script(ck)
    typed = _script(ck, "--set", "gpu_type=h100")
    assert "\n#SBATCH --gpus-per-node=h100:4\n" in typed and "--gres" not in typed and "gres=" not in typed
    assert "\n#SBATCH --gres=nvme:1\n" in _script(ck, "--sbatch", "gres=nvme:1")


@pytest.mark.parametrize("args,needle", [
    (("--sbatch", "gres=gpu:h100:8"), "--sbatch gres=gpu:h100:8: asks for GPUs beside the --gpus-per-node"),
    (("--sbatch", "gres=nvme:1,gpu:2"), "--sbatch gres=nvme:1,gpu:2: asks for GPUs"),
    (("--set", "gpu_type=h100:8"), "--set gpu_type='h100:8'"),
    (("--sbatch", "gpus=8"), "sets --gpus, which clusterkit writes itself"),
])
def test_a_second_gpu_request_is_refused(ck, tmp_path, args: tuple[str, ...], needle: str) -> None:
    result = ck("render", "--site", "testbed", "--nodes", "2", "--out", str(tmp_path / "r"), *args,
                "--", "python", "train.py")
    assert_one_line_error(result, 2, needle)
    assert not (tmp_path / "r").exists()


def test_local_sites_have_no_gpu_type(ck) -> None:
    result = ck("render", "--site", "local", "--set", "gpu_type=h100", "--", "python", "train.py")
    assert_one_line_error(result, 2, "gpu_type applies to Slurm sites only")
