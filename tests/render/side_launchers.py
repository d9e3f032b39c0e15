"""Runs horovod's and colossalai's own launcher code on one rendered argv; not a test module.

    python side_launchers.py SIDE_DIR {horovod|colossalai} REQUEST.json RESULT.json

SIDE_DIR is the directory tests/run.sh unpacks the pinned releases into (CK_SIDE_LAUNCHERS): the
``horovod`` and ``colossalai`` packages as their source releases ship them, and fabric (+ the
packages it needs) from wheels.  It goes first on sys.path; the packages import whole, through
their own ``__init__`` files; nothing in them is stubbed or edited.  What they import beyond the
side directory (torch, click, paramiko, invoke, psutil, cloudpickle, PyYAML, packaging) comes from
this environment, which clusterkit's own dependencies and test extras install.  REQUEST holds ``argv``
(the launcher's words, bash-expanded from plan.json), ``hostfile`` (the rendered one, or null)
and ``hosts`` (the plan's).  RESULT gets what the launcher's code made of them.

Each launcher runs up to the point where it would contact the hosts; only that contact is a
stand-in, named here:

- horovod: ``launch.parse_args()`` (on sys.argv, as horovodrun calls it) and ``launch._run()``,
  which resolves -H / --hostfile (``hosts.parse_host_files``) / localhost and picks static or
  elastic mode.  STAND-IN: ``_run_static`` / ``_run_elastic`` (ssh checks, NIC discovery, then
  gloo/mpi) are replaced by a recorder of the args they get; the recorded hosts then go through
  ``hosts.parse_hosts_and_slots`` (as _run_static and mpi_run call it) and
  ``hosts.get_host_assignments(hosts.parse_hosts(...), num_proc)`` (as gloo_run calls it).
- colossalai: the click command ``colossalai.cli.launcher.run`` (``make_context`` on the argv,
  then ``invoke``: the command's own checks, then ``launch_multi_processes``, which calls
  ``fetch_hostfile``, ``parse_device_filter`` and ``get_launch_command`` per node).
  STAND-IN: ``MultiNodeRunner`` (fabric SSH connections that run each node's command) is
  replaced by a recorder of the hosts and the per-node commands.  STAND-IN: name resolution:
  ``HostInfo`` asks ``socket.getaddrinfo`` about each host (to tell the local one); the plan's
  host names do not exist here, so they resolve to loopback addresses (127.0.1.x; nothing connects to them); every
  other name goes to the real resolver.
"""

from __future__ import annotations

import importlib
import json
import socket
import sys
from pathlib import Path
from typing import Any


def loaded_from(side: Path, *modules: Any) -> list[str]:
    files = [str(Path(m.__file__).resolve()) for m in modules]
    for f in files:
        assert Path(f).is_relative_to(side.resolve()), f"{f} is not from the side directory {side}"
    return files


def horovod(side: Path, req: dict[str, Any]) -> dict[str, Any]:
    import horovod.runner.launch as launch
    from horovod.runner.common.util import hosts

    seen: dict[str, Any] = {}
    launch._run_static = lambda args: seen.update(mode="static", args=args)      # stand-in, see above
    launch._run_elastic = lambda args: seen.update(mode="elastic", args=args)    # stand-in, see above
    sys.argv = ["horovodrun", *req["argv"][1:]]
    args = launch.parse_args()
    launch._run(args)
    args = seen["args"]
    names, slots = hosts.parse_hosts_and_slots(args.hosts)
    alloc = hosts.get_host_assignments(hosts.parse_hosts(args.hosts), args.num_proc)
    out: dict[str, Any] = {
        "loaded": loaded_from(side, launch, hosts), "mode": seen["mode"], "num_proc": args.num_proc,
        "hosts_arg": args.hosts, "hostfile_arg": args.hostfile, "command": args.command,
        "names": names, "slots": slots,
        "alloc": [[s.hostname, s.rank, s.local_rank, s.size, s.local_size, s.cross_rank, s.cross_size]
                  for s in alloc]}
    if req["hostfile"]:           # the rendered hostfile, as horovodrun --hostfile reads it
        out["hostfile_names"], out["hostfile_slots"] = hosts.parse_hosts_and_slots(
            hosts.parse_host_files(req["hostfile"]))
    return out


def colossalai(side: Path, req: dict[str, Any]) -> dict[str, Any]:
    fake = {h: f"127.0.1.{i + 1}" for i, h in enumerate(req["hosts"])}
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *rest: Any, **kw: Any) -> Any:   # stand-in, see above
        if host in fake:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (fake[host], int(port or 0)))]
        return real_getaddrinfo(host, port, *rest, **kw)

    socket.getaddrinfo = getaddrinfo

    import colossalai.cli.launcher as launcher
    run_mod = importlib.import_module("colossalai.cli.launcher.run")   # the package's ``run`` is the command
    hostinfo = importlib.import_module("colossalai.cli.launcher.hostinfo")

    seen: dict[str, Any] = {"connected": None, "sent": []}

    class RecordingRunner:                                              # stand-in, see above
        def connect(self, host_info_list: Any, workdir: str, env: dict[str, str]) -> None:
            seen["connected"] = [[h.hostname, h.port, h.is_local_host] for h in host_info_list]

        def send(self, hostinfo: Any, cmd: str) -> None:
            seen["sent"].append([hostinfo.hostname, cmd])

        def stop_all(self) -> None:
            pass

        def recv_from_all(self) -> dict[str, str]:
            return {h: "success" for h, _ in seen["sent"]}

    run_mod.MultiNodeRunner = RecordingRunner
    command = launcher.run
    assert req["argv"][:2] == ["colossalai", "run"], req["argv"]
    ctx = command.make_context("run", list(req["argv"][2:]))
    params = {k: list(v) if isinstance(v, tuple) else v for k, v in ctx.params.items()}
    code: Any = "returned"
    try:
        with ctx:
            command.invoke(ctx)
    except SystemExit as e:       # launch_multi_processes ends with sys.exit(0); its refusals with exit()
        code = e.code
    out: dict[str, Any] = {"loaded": loaded_from(side, launcher, run_mod, hostinfo), "params": params,
                           "exit": code, **seen}
    if req["hostfile"]:           # the rendered hostfile through fetch_hostfile on its own
        pool = run_mod.fetch_hostfile(req["hostfile"], ssh_port=None)
        out["hostfile_hosts"] = [h.hostname for h in pool]
    return out


def main() -> None:
    side, which, request, result = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    sys.path.insert(0, str(side))
    req = json.loads(Path(request).read_text())
    out = {"horovod": horovod, "colossalai": colossalai}[which](side, req)
    Path(result).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
