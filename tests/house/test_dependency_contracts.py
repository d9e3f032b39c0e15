"""The private parts of dependencies clusterkit relies on, checked against the installed versions.

clusterkit submits its own rendered script through submitit (``SlurmExecutor._submit_command``
with ``_make_submission_file_text`` and ``_num_tasks`` overridden), starts submitit's local
controller with its environment contract, and gives paramiko's config module a cached
``getpass``.  None of these is public API, so pyproject pins the tested ranges
(``submitit>=1.5,<1.6``, ``paramiko>=3.4,<6``) and these tests fail when an upgrade moves them,
before a user's submit does.
"""

from __future__ import annotations

import inspect
import re

from tests.conftest import REPO


def _params(fn: object) -> list[str]:
    return list(inspect.signature(fn).parameters)  # type: ignore[arg-type]


def test_submitit_slurm_executor_hooks() -> None:
    from submitit.core.utils import FailedJobError
    from submitit.slurm.slurm import SlurmExecutor

    assert _params(SlurmExecutor._submit_command) == ["self", "command"]
    assert _params(SlurmExecutor._make_submission_file_text) == ["self", "command", "uid"]
    assert _params(SlurmExecutor._num_tasks) == ["self"]
    assert issubclass(FailedJobError, Exception)
    # _submit_command (PicklingExecutor's) writes the text _make_submission_file_text returns
    # into the submission file and runs sbatch on it, once per _num_tasks result
    body = inspect.getsource(SlurmExecutor._submit_command)
    assert "_make_submission_file_text" in body and "_num_tasks" in body


def test_submitit_local_controller_environment() -> None:
    import importlib

    from submitit.local import local

    importlib.import_module("submitit.local._local")   # what `python -m submitit.local._local` runs
    theirs = set(re.findall(r"SUBMITIT_\w+", inspect.getsource(local.start_controller)))
    ours_src = (REPO / "toolkit" / "clusterkit" / "scheduler" / "local" / "__init__.py").read_text()
    start = ours_src.index("def submit_local(")
    ours = set(re.findall(r"(SUBMITIT_\w+)=", ours_src[start:ours_src.index("\ndef ", start + 1)]))
    assert ours == theirs, (sorted(ours - theirs), sorted(theirs - ours))


def test_paramiko_config_getpass() -> None:
    import paramiko.config

    assert hasattr(paramiko.config, "getpass")
    assert "getpass.getuser()" in inspect.getsource(paramiko.config)


def test_the_pins_hold_the_installed_versions() -> None:
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet

    text = (REPO / "pyproject.toml").read_text()
    for name in ("submitit", "paramiko"):
        spec = re.search(rf'"{name}([^"]+)"', text)
        assert spec, name
        assert "<" in spec.group(1), f"{name}: no upper bound"
        assert SpecifierSet(spec.group(1)).contains(version(name)), (name, spec.group(1), version(name))
