"""The command line's side of working through a login node (docs/laptop.md): ``submit`` on a
site with ``login:`` sends the code and submits there; ``status``, ``logs``, ``cancel`` and
``doctor`` of a job submitted that way run on the login node, their output relayed."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

# submit's options the laptop acts on itself, never forwarded (the login node gets its own)
_LAPTOP_FLAGS = {"--follow", "-f", "--wait", "--no-wait", "--accept-new-host-keys", "--snapshot"}
_LAPTOP_VALUED = {"--site", "--code", "--code-upload"}


def forwarded_args(command: click.Command, tokens: Sequence[str]) -> list[str]:
    """The options and command of ``tokens`` (what followed ``clusterkit submit``) the login node's
    submit gets: the laptop's own dropped, every option's value kept with it (read as click reads it)."""
    takes_value: dict[str, bool] = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for name in (*param.opts, *param.secondary_opts):
                takes_value[name] = not (param.is_flag or param.count)
    out: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--":
            return out + list(tokens[i:])
        name, eq, _ = tok.partition("=")
        valued = takes_value.get(name, False) and not eq
        group = list(tokens[i:i + 2]) if valued else [tok]
        i += len(group)
        if name in _LAPTOP_FLAGS or name in _LAPTOP_VALUED:
            continue
        out += group
    return out


def submit_remote(command: click.Command, site_ref: str, *, code_dir: str | None, snapshot: bool | None,
                  dry_run: bool, follow: bool, wait: bool | None, as_json: bool, accept_new_host_keys: bool) -> int:
    from clusterkit.api import Site
    from clusterkit.api import login as api_login
    from clusterkit.cli import INVOKED, output
    from clusterkit.errors import InputError

    if snapshot is False:
        raise InputError("--no-snapshot: a job submitted through the login node runs the code sent with it "
                         "(submit on the login node itself to run its live tree)")
    if wait:
        raise InputError("--wait: from a laptop, follow the job with --follow (or `clusterkit logs JOB --follow`)")
    site = Site.load(site_ref).config
    args = forwarded_args(command, INVOKED[2:])
    done = api_login.submit(site, args, code_dir=code_dir, dry_run=dry_run,
                            accept_new_host_keys=accept_new_host_keys, note=lambda m: output.info(f"clusterkit: {m}"),
                            out=_write_out, err=_write_err)
    recs = done.saved
    if not recs:
        return done.exit_status
    if as_json:
        jobs = [{**doc, "job": rec.key, "login": rec.login.host, "remote_job": f"{rec.remote_site}:{rec.job_id}",
                 "code": done.uploaded.info.to_dict()} for rec, doc in zip(recs, done.remote, strict=True)]
        output.emit_json(jobs[0] if len(jobs) == 1 else {"chain": jobs})
    else:
        for rec, doc in zip(recs, done.remote, strict=True):
            output.line(f"Submitted job {rec.job_id} through the login node {rec.login.host} (site {rec.site}): "
                        f"{doc.get('launcher', '?')} on {doc.get('nodes', '?')} node(s)")
            output.line(f"  run directory on the cluster: {rec.run_dir}")
        output.line(f"  {done.uploaded.info.worded()}; {done.uploaded.files_sent} file(s) sent")
        output.line(f"  its state: clusterkit status {recs[0].job_id}")
        output.line(f"  its logs:  clusterkit logs {recs[0].job_id} --follow")
    rec = recs[0]
    if follow:
        return api_login.forward(rec, "logs", [api_login.remote_ref(rec, rec.job_id), "--follow"],
                                 out=_write_out, err=_write_err)
    return 0


def _write_out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _write_err(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def forward_job(command: str, refs: Sequence[str], *, latest: bool = True) -> int | None:
    """Run this command on the login node when the job(s) it names were submitted through one
    (without a JOB: when the newest job submitted from here was); None: run it here."""
    from clusterkit.api import login as api_login
    from clusterkit.cli import INVOKED

    if api_login.on_login_node():
        return None
    tokens = list(INVOKED[2:])
    found = [(ref, api_login.find(ref)) for ref in refs]
    if refs:
        if not found or any(rec is None for _, rec in found):
            return None
        logins = {rec.login for _, rec in found if rec is not None}
        if len(logins) > 1:
            from clusterkit.errors import InputError

            raise InputError(f"{command}: the jobs named went through different login nodes; name one at a time")
        for ref, rec in found:
            if rec is not None and ref in tokens:
                tokens[tokens.index(ref)] = api_login.remote_ref(rec, ref)
        rec = found[0][1]
    else:
        newest = api_login.latest()
        if not latest or newest is None or not _newer_than_local(newest[1]):
            return None
        rec = newest[0]
        tokens.insert(0, api_login.remote_ref(rec, rec.job_id))
    assert rec is not None
    return api_login.forward(rec, command, tokens, out=_write_out, err=_write_err)


def _newer_than_local(stamp: str) -> bool:
    import re

    from clusterkit.scheduler.records import RecordStore

    files = RecordStore().files()
    return not files or re.sub(r"[^0-9T]", "", stamp) > files[-1].name.split("-", 1)[0]
