"""Submitting through the login node, and following such a job (docs/laptop.md).

Why clusterkit runs on the login node rather than the laptop rendering the job and running
``sbatch`` over SSH: the job is rendered where it runs, against the cluster's own Slurm, paths,
site file and node history, by the same code as a submit made there (preflight before submit,
``--after``, run-name checks and chains all ask Slurm, which only the cluster can answer), and the
run directory and records there are the ones every job of the cluster has.  The laptop sends the
code once and keeps a small record (:mod:`clusterkit.remote.records`).

Every remote command is one argv, each word quoted (``shlex.join``): no text of the user's is
evaluated by the login node's shell.  ``CLUSTERKIT_ON_LOGIN_NODE=1`` tells the clusterkit there
that it is on the login node (a site with ``login:`` is then used as it is).
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from clusterkit.config.login_keys import LoginKeys
from clusterkit.config.schema import Site
from clusterkit.errors import ClusterkitError, ExitCode, LoginUnreachable, SnapshotError, SubmitError
from clusterkit.nodes.transport.session import LoginSession, SessionError
from clusterkit.remote import records
from clusterkit.remote.upload import Uploaded, upload
from clusterkit.tooltext import printable, printable_lines, shorten
from clusterkit.vocab import is_job_id

ON_LOGIN_NODE = "CLUSTERKIT_ON_LOGIN_NODE"
VERSION_TIMEOUT_S = 120.0
SUBMIT_TIMEOUT_S = 1800.0   # a submit there may preflight nodes first


class LoginSetupError(ClusterkitError):
    """The login node answers, but has no clusterkit to run (exit 1)."""

    exit_code = ExitCode.FAILURE


def on_login_node() -> bool:
    return os.environ.get(ON_LOGIN_NODE) == "1"


def through_login(site: Site) -> bool:
    """Whether commands for ``site`` go through its login node (it names one and this is not it)."""
    return site.login is not None and not on_login_node()


@contextlib.contextmanager
def connect(login: LoginKeys, *, accept_new_host_keys: bool = False) -> Iterator[LoginSession]:
    """A session to the login node; an unreachable one is LoginUnreachable (exit 3)."""
    session = LoginSession(login.host, user=login.user, port=login.port, proxy_jump=login.proxy_jump,
                           accept_new_host_keys=accept_new_host_keys, connect_timeout_s=login.connect_timeout_s)
    try:
        session.open()
    except SessionError as exc:
        raise LoginUnreachable(f"login node {login.host}: {printable(str(exc))}") from None
    try:
        yield session
    except SessionError as exc:
        if exc.kind == "changed":
            raise SnapshotError(str(exc)) from None
        raise SubmitError(f"login node {login.host}: {printable(str(exc))}") from None
    finally:
        session.close()


def clusterkit_argv(login: LoginKeys, *args: str) -> list[str]:
    return ["env", f"{ON_LOGIN_NODE}=1", login.python, "-m", "clusterkit", *args]


def check_installed(session: LoginSession, login: LoginKeys) -> str:
    """clusterkit's version on the login node; LoginSetupError when it has none."""
    rc, out, err = session.capture(clusterkit_argv(login, "--version"), timeout_s=VERSION_TIMEOUT_S)
    words = out.split()
    if rc != 0 or len(words) < 3 or words[0] != "clusterkit,":
        why = (err.strip().splitlines() or out.strip().splitlines() or ["no output"])[-1]
        raise LoginSetupError(f"clusterkit is not installed on the login node {login.host} (`{login.python} -m "
                              f"clusterkit --version` exited {rc}: {shorten(printable(why), 160)}); install it "
                              "there, or name the Python that has it with login.python in the site file")
    return shorten(printable(words[-1]), 40)


class Relay:
    """Output of a remote command handed on as text: decoded leniently as it comes (a character
    split between chunks included), control characters other than newline and tab dropped."""

    def __init__(self, write: Callable[[str], None]):
        self._write = write
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def __call__(self, data: bytes) -> None:
        text = self._decoder.decode(data)
        if text:
            self._write(printable_lines(text))


@dataclass(frozen=True)
class Submitted:
    exit_status: int
    saved: list[records.LoginRecord]     # one job, or a chain's members in order
    uploaded: Uploaded
    remote: list[dict[str, object]]      # what the login node's submit printed (--json), validated fields only

    @property
    def record(self) -> records.LoginRecord | None:
        return self.saved[0] if self.saved else None


def submit(site: Site, args: Sequence[str], *, code_dir: str | None, dry_run: bool,
           accept_new_host_keys: bool, note: Callable[[str], None],
           out: Callable[[str], None], err: Callable[[str], None]) -> Submitted:
    """Upload the code and run ``clusterkit submit ARGS`` on the login node; keep the job's record."""
    login = site.login
    if login is None:
        raise ValueError("site has no login node")
    remote_site = login.site or site.name
    with connect(login, accept_new_host_keys=accept_new_host_keys) as session:
        version = check_installed(session, login)
        note(f"login node {login.host}: clusterkit {version}")
        up = upload(session, site, code_dir, note=note)
        argv = clusterkit_argv(login, "submit", *([] if dry_run else ["--no-wait", "--json"]),
                               "--site", remote_site, "--code-upload", up.tree, *args)
        if dry_run:
            return Submitted(session.stream(argv, Relay(out), Relay(err)), [], up, [])
        rc, stdout, stderr = session.capture(argv, timeout_s=SUBMIT_TIMEOUT_S)
    if stderr:
        Relay(err)(stderr.encode())
    if rc != 0:
        return Submitted(rc, [], up, [])
    docs = _submitted_json(stdout, login.host)
    recs = [records.save(str(d["job_id"]), site.name, remote_site, login, str(d["run_dir"]), up.info.to_dict())
            for d in docs]
    return Submitted(0, recs, up, docs)


def _submitted_json(stdout: str, host: str) -> list[dict[str, object]]:
    """The jobs the login node's ``submit --json`` printed (one, or a chain's ``{"chain": [...]}``),
    each with a valid job id and run directory, else SubmitError."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    try:
        doc = json.loads(lines[-1]) if lines else None
    except (json.JSONDecodeError, RecursionError):
        doc = None
    members = doc.get("chain") if isinstance(doc, dict) and "chain" in doc else [doc]
    keep = ("job", "job_id", "site", "stage", "launcher", "nodes", "world_size", "run_dir", "state")
    out: list[dict[str, object]] = []
    for m in members if isinstance(members, list) and 0 < len(members) <= 1000 else [None]:
        job_id = m.get("job_id") if isinstance(m, dict) else None
        run_dir = m.get("run_dir") if isinstance(m, dict) else None
        if not (isinstance(m, dict) and isinstance(job_id, str) and is_job_id(job_id) and isinstance(run_dir, str)
                and len(run_dir) <= 4096):
            raise SubmitError(f"login node {host}: its submit printed no job id clusterkit can read "
                              f"({shorten(printable(stdout.strip()), 120) or 'nothing'}); see `clusterkit status` "
                              "there")
        out.append({k: m[k] for k in keep if isinstance(m.get(k), (str, int)) and not isinstance(m.get(k), bool)})
    return out


def forward(rec: records.LoginRecord, command: str, args: Sequence[str], *,
            out: Callable[[str], None], err: Callable[[str], None]) -> int:
    """Run ``clusterkit COMMAND ARGS`` on the job's login node, its output relayed as it comes;
    its exit status."""
    with connect(rec.login) as session:
        return session.stream(clusterkit_argv(rec.login, command, *args), Relay(out), Relay(err))


def remote_ref(rec: records.LoginRecord, ref: str) -> str:
    """The job as the login node names it: its site there and the id (an array task's too)."""
    return f"{rec.remote_site}:{ref.rpartition(':')[2]}"
