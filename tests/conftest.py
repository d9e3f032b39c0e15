"""Fixtures shared by every test directory: ``ck``, the one way tests run the clusterkit CLI."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest

REPO = Path(__file__).resolve().parents[1]

# the SSH lab fixtures (sshlab_factory, ...) for every test directory
# and the lanes of a parallel run (tests/lanes.py)
pytest_plugins = ["tests.sshlab.fixtures", "tests.lanes"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--regen-golden", action="store_true", default=False,
                     help="rewrite tests/golden and hostfiles/ from the current renderer, then review the diff")


#: markers that make a test end to end (``e2e``): the fast tier, ``-m "not e2e"``, leaves them out
E2E_MARKERS = ("slurm", "sshlab", "torch")


# after the hooks of tests/slurm's and tests/sshlab's conftests (pytest calls the root's last of
# the conftests), before -m deselects (the mark plugin's hook comes after every conftest's)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(name) for name in E2E_MARKERS):
            item.add_marker(pytest.mark.e2e)


class CLIResult(NamedTuple):
    """What one clusterkit command line did: exit status, stdout, stderr (``code, out, err = ck(...)``)."""

    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.err.strip().splitlines()

    # the subprocess.CompletedProcess names, for helpers that take either kind of result
    @property
    def returncode(self) -> int:
        return self.code

    @property
    def stdout(self) -> str:
        return self.out

    @property
    def stderr(self) -> str:
        return self.err


def default_sigint() -> None:
    """``preexec_fn`` for a process a test interrupts with SIGINT: default handling, whatever
    this runner's (``nohup``, a backgrounded script: SIGINT ignored, which children inherit)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


Env = Mapping[str, "str | None"]
Wrap = Callable[[Sequence[str]], Sequence[str]]


class CLI:
    """The one way tests run ``clusterkit ARGS`` (the ``ck`` fixture).

    ``ck(ARGS)`` runs it in-process through ``clusterkit.cli.main``, the console script's own
    path (error boundary included), with stdout and stderr captured.  ``ck.proc(ARGS)`` (or
    ``ck(ARGS, process=True)``) runs ``python -m clusterkit ARGS`` as a separate process, for
    what needs one: an environment of its own, a timeout, stdin, a umask, signals, tracebacks,
    start-up; ``ck.popen(ARGS)`` starts one and leaves it to the caller.

    ``env`` is laid over ``os.environ`` (a value of None removes that variable); ``wrap`` turns
    the argv into the one actually started (a network namespace, ``unshare``, ...).  ``bind()``
    returns a copy with other defaults: the SSH lab and the Slurm testbed bind their env there.
    Fixtures wider than a test, which cannot take ``ck``, make a ``CLI()``: process mode only.
    """

    def __init__(self, capsys: pytest.CaptureFixture[str] | None = None,
                 monkeypatch: pytest.MonkeyPatch | None = None, *, cwd: Path | str = REPO,
                 env: Env | None = None, process: bool = False, timeout: float = 120,
                 wrap: Wrap | None = None) -> None:
        self._capsys = capsys
        self._monkeypatch = monkeypatch
        self.cwd = cwd
        self.env: dict[str, str | None] = dict(env or {})
        self.process = process
        self.timeout = timeout
        self.wrap = wrap

    def bind(self, *, cwd: Path | str | None = None, env: Env | None = None, process: bool | None = None,
             timeout: float | None = None, wrap: Wrap | None = None) -> CLI:
        """A copy with these defaults (``env`` is laid over the bound one)."""
        return CLI(self._capsys, self._monkeypatch, cwd=self.cwd if cwd is None else cwd,
                   env={**self.env, **(env or {})}, process=self.process if process is None else process,
                   timeout=self.timeout if timeout is None else timeout, wrap=wrap or self.wrap)

    def argv(self, *args: str) -> list[str]:
        """The command line that starts clusterkit as a process (the checkout's python)."""
        return [sys.executable, "-m", "clusterkit", *args]

    def environ(self, env: Env | None = None) -> dict[str, str]:
        """The environment a process gets: os.environ, then the bound env, then ``env``."""
        full = dict(os.environ)
        for key, value in {**self.env, **(env or {})}.items():
            if value is None:
                full.pop(key, None)
            else:
                full[key] = value
        return full

    def __call__(self, *args: str, process: bool | None = None, cwd: Path | str | None = None,
                 env: Env | None = None, timeout: float | None = None, input: str | None = None,
                 umask: int | None = None, wrap: Wrap | None = None) -> CLIResult:
        cwd = self.cwd if cwd is None else cwd
        if self.process if process is None else process:
            argv = self.argv(*args)
            wrap = wrap or self.wrap
            p = subprocess.run(wrap(argv) if wrap else argv, cwd=cwd, env=self.environ(env), text=True,
                               capture_output=True, input=input, timeout=self.timeout if timeout is None else timeout,
                               preexec_fn=None if umask is None else (lambda: os.umask(umask)))
            return CLIResult(p.returncode, p.stdout, p.stderr)
        extra = [name for name, value in (("timeout", timeout), ("umask", umask), ("wrap", wrap)) if value is not None]
        if extra:
            raise TypeError(f"{', '.join(extra)} needs a process: ck.proc(...)")
        return self._in_process(args, cwd, env, input)

    def proc(self, *args: str, **kw: Any) -> CLIResult:
        """``python -m clusterkit ARGS`` as a separate process (keywords as for ``ck(...)``)."""
        return self(*args, process=True, **kw)

    def popen(self, *args: str, cwd: Path | str | None = None, env: Env | None = None,
              wrap: Wrap | None = None, **popen_kw: Any) -> subprocess.Popen[str]:
        """Start ``python -m clusterkit ARGS``, stdout and stderr piped, text, SIGINT handled by
        default (:func:`default_sigint`); the caller reaps it."""
        argv = self.argv(*args)
        wrap = wrap or self.wrap
        popen_kw.setdefault("preexec_fn", default_sigint)
        popen_kw.setdefault("stdout", subprocess.PIPE)
        popen_kw.setdefault("stderr", subprocess.PIPE)
        popen_kw.setdefault("text", True)
        return subprocess.Popen(wrap(argv) if wrap else argv, cwd=self.cwd if cwd is None else cwd,
                                env=self.environ(env), **popen_kw)

    def _in_process(self, args: Sequence[str], cwd: Path | str, env: Env | None, input: str | None) -> CLIResult:
        from clusterkit.cli import main

        if self._capsys is None or self._monkeypatch is None:
            raise TypeError("in-process runs need the ck fixture; CLI() runs processes only: ck.proc(...)")
        capsys, monkeypatch = self._capsys, self._monkeypatch
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        with monkeypatch.context() as scoped:
            for key, value in {**self.env, **(env or {})}.items():
                if value is None:
                    scoped.delenv(key, raising=False)
                else:
                    scoped.setenv(key, value)
            if input is not None:
                scoped.setattr(sys, "stdin", io.StringIO(input))
            try:
                main(list(args))
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        cap = capsys.readouterr()
        return CLIResult(code, cap.out, cap.err)


@pytest.fixture
def ck(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CLI:
    """Run ``clusterkit ARGS``: ``ck(...)`` in-process, ``ck.proc(...)`` as a process (see :class:`CLI`)."""
    return CLI(capsys, monkeypatch)


def shared_site(directory: Path, site: str, shared: Path) -> Path:
    """The example site ``site`` with ``shared`` declared shared storage, as a site file in
    ``directory``.  Multi-node run directories must be on a site's shared storage; in tests a
    temporary directory stands in for the cluster's Lustre or NFS."""
    import yaml

    from clusterkit.config.load import load_site

    parent = load_site(site)
    storage = [s.model_dump(exclude_defaults=True) for s in parent.storage]
    storage.append({"path": str(shared), "type": "local", "shared": True})
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{site}.yaml"
    path.write_text(yaml.safe_dump({"extends": str(REPO / "site_configs" / f"{site}.yaml"), "storage": storage}))
    return path


def assert_one_line_error(result: CLIResult, code: int, *needles: str) -> None:
    """A user error: the documented exit code, 'clusterkit: error:' lines, no traceback."""
    assert result.code == code, (result.code, result.out, result.err)
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    errors = [line for line in lines if line.startswith("clusterkit: error:")]
    assert errors, result.err
    assert all(line.startswith(("clusterkit: error:", "clusterkit: warning:")) for line in lines), result.err
    for needle in needles:
        assert needle in result.err, (needle, result.err)


def make_plan(site: Any, request: Any) -> Any:
    """:func:`clusterkit.job.plan.make_plan` with the site's own scheduler's share, as
    ``actions.render_run`` plans."""
    from clusterkit import scheduler
    from clusterkit.job import plan

    return plan.make_plan(site, request, scheduler.parts(site.scheduler.kind))
