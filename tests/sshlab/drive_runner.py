"""Run a clusterkit runner inside the lab and print its results as JSON (a test helper).

The runner tests start this with ``lab.run([...])`` so that the client runs inside the lab's
network namespace, as ``clusterkit preflight`` would::

    python drive_runner.py '{"runner": "ssh", "hosts": [...], "script": "...",
                             "options": {...}, "timeout_s": 5, "fanout": 8}'

Each finished node is also announced on stderr (``done HOST``) as it arrives, so a test can
interrupt the run part-way through.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from clusterkit.nodes.transport import LocalRunner, NodeOutput, SrunRunner, SSHRunner


def main() -> int:
    req = json.loads(sys.argv[1])
    cls = {"ssh": SSHRunner, "local": LocalRunner, "srun": SrunRunner}[req["runner"]]
    runner = cls(**req.get("options", {}))

    children = [0]  # the most child processes seen while results came in (worker processes)

    def announce(r: NodeOutput) -> None:
        print(f"done {r.host}", file=sys.stderr, flush=True)
        children[0] = max(children[0], len(_children()))

    results = runner.run_many(req["hosts"], req["script"], timeout_s=req.get("timeout_s"),
                              fanout=req.get("fanout"), on_result=announce)
    # Threads still alive 3 s after the run: a paramiko transport left open (waiting for
    # the server's LoginGraceTime) would show up here; closed ones end within milliseconds.
    deadline = time.monotonic() + 3
    for t in threading.enumerate():
        if t is not threading.main_thread():
            t.join(max(0.0, deadline - time.monotonic()))
    lingering = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    print(json.dumps({"interrupted": results.interrupted, "wall_s": results.wall_s,
                      "lingering_threads": lingering, "children": children[0],
                      "children_left": len(_children()),
                      "order": list(results),
                      "results": {h: r.to_json() for h, r in results.items()}}))
    return 0


def _children() -> list[str]:
    pid = os.getpid()
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


if __name__ == "__main__":
    sys.exit(main())
