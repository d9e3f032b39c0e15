"""``bench/goodput_sim.py`` as the README quotes it: 1,024 to 16,384 GPUs, three checkpoint
intervals each, requeue against relaunch in the allocation against spares, the simulation within
1 % of the closed form (the script's own exit status says so, and the test reads the figures)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO

ROW = re.compile(r"\s*(\d+)\s+[\d.]+h\s+[\d.]+m (daly|half|twice)\s+([\d.]+)%\s+([\d.]+)%\s+([+-][\d.]+)%"
                 r"\s+([\d.]+)%\s+([\d.]+)%\s+([+-][\d.]+)%\s+([\d.]+)%\s+(\d+)")


def test_the_simulation_agrees_with_the_closed_form_at_every_scale() -> None:
    res = subprocess.run([sys.executable, str(REPO / "bench" / "goodput_sim.py"), "--restart-alloc", "21",
                          "--restart-queue", "198"], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "(given)" in res.stdout.splitlines()[0]
    rows = [m.groups() for line in res.stdout.splitlines() if (m := ROW.fullmatch(line))]
    assert sorted({int(r[0]) for r in rows}) == [1024, 2048, 4096, 8192, 16384]
    assert len(rows) == 15 and {r[1] for r in rows} == {"daly", "half", "twice"}
    for r in rows:
        requeue, closed, alloc, alloc_closed, spares = float(r[2]), float(r[3]), float(r[5]), float(r[6]), float(r[8])
        assert abs(requeue - closed) < 1 and abs(alloc - alloc_closed) < 1, r
        assert requeue <= alloc + 0.2 and spares <= alloc + 0.2, r   # a cheaper restart never keeps less
    daly = {int(r[0]): float(r[2]) for r in rows if r[1] == "daly"}
    assert daly[16384] < daly[1024]                                    # more GPUs fail more often
