"""The site key ``network.rendezvous_read_timeout_s``: torchrun's c10d store read timeout, written
into ``--rdzv-conf`` (``read_timeout=``) only where the site sets it, refused below the floor at its
line, and read by torch's own torchrun parser and c10d backend as the store's timeout."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from clusterkit.config.machine import RDZV_READ_TIMEOUT_MIN_S
from tests.conftest import REPO, assert_one_line_error


def _site(tmp_path: Path, value: str | None, base: str = "ib-h100") -> str:
    path = tmp_path / "s.yaml"
    key = "" if value is None else f"network:\n  rendezvous_read_timeout_s: {value}\n"
    path.write_text(f"name: s\nextends: {REPO / 'site_configs' / (base + '.yaml')}\n"
                    f"storage:\n  - {{path: {tmp_path}, type: nfs, use: [data, checkpoints]}}\n{key}")
    return str(path)


def _line(ck, tmp_path: Path, site: str, nodes: str = "2") -> str:  # type: ignore[no-untyped-def]
    run_dir = tmp_path / "run"
    result = ck("render", "--site", site, "--stage", "multi-node", "--nodes", nodes, "--launcher", "torchrun",
                "--out", str(run_dir), "--", "python", "train.py")
    assert result.code == 0, result.err
    return str(json.loads((run_dir / "plan.json").read_text())["launch"]["line"])


@pytest.mark.parametrize("value,needle", [
    ("9", "9: 10 to 3600 seconds"),
    ("0", "0: 10 to 3600 seconds"),
    ("3601", "3601: 10 to 3600 seconds"),
    ('"15"', "a valid integer"),
    ("true", "a valid integer"),
    ("12.5", "a valid integer"),
])
def test_a_read_timeout_below_the_floor_or_not_whole_seconds_is_refused_at_its_line(
        ck, tmp_path: Path, value: str, needle: str) -> None:
    result = ck("sites", "validate", _site(tmp_path, value))
    assert_one_line_error(result, 2, "s.yaml:6: network.rendezvous_read_timeout_s", needle)
    assert len(result.err.strip().splitlines()) == 1, result.err


def test_unset_nothing_is_written_and_torchs_default_holds(ck, tmp_path: Path) -> None:
    line = _line(ck, tmp_path, _site(tmp_path, None))
    assert "--rdzv-conf join_timeout=602 " in line and "read_timeout" not in line


def test_set_it_follows_the_join_timeout(ck, tmp_path: Path) -> None:
    line = _line(ck, tmp_path, _site(tmp_path, str(RDZV_READ_TIMEOUT_MIN_S)), nodes="8")
    assert f"--rdzv-conf join_timeout=608,read_timeout={RDZV_READ_TIMEOUT_MIN_S} " in line


def test_torch_reads_it_as_the_c10d_stores_timeout(ck, tmp_path: Path) -> None:
    """torchrun's own parser hands ``read_timeout`` to the c10d backend, whose TCPStore takes it as
    its timeout (the store is hosted here, on a port of the system's choosing)."""
    run = pytest.importorskip("torch.distributed.run")
    c10d = pytest.importorskip("torch.distributed.elastic.rendezvous.c10d_rendezvous_backend")
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    words = _line(ck, tmp_path, _site(tmp_path, "15")).split()
    conf = words[words.index("--rdzv-conf") + 1]
    args = run.get_args_parser().parse_args(["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-conf", conf, "x.py"])
    config, _, _ = run.config_from_args(args)
    assert config.rdzv_configs["read_timeout"] == "15" and config.rdzv_configs["join_timeout"] == "602"
    params = RendezvousParameters(backend="c10d", endpoint="127.0.0.1:0", run_id="t", min_nodes=1, max_nodes=1,
                                  is_host="true", **config.rdzv_configs)
    _, store = c10d.create_backend(params)
    assert store.timeout == datetime.timedelta(seconds=15)
