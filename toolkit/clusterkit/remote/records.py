"""The laptop's records of jobs submitted through a login node: one small JSON file per job in
``<state>/remote/`` (beside the job records), naming the job on the cluster and the way there.
Read as data: a regular file, at most 64 KiB, strict JSON, validated."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from clusterkit.config.login_keys import LoginKeys
from clusterkit.errors import NoJobRecord, RecordError
from clusterkit.safefile import NotRegular, read_capped
from clusterkit.scheduler.records import atomic_write_text, now_utc, records_dir
from clusterkit.vocab import is_job_id

VERSION = 1
_MAX_BYTES = 64 << 10
_MAX_FILES = 100_000


class LoginRecord(BaseModel):
    """A job submitted from here through ``login`` (its keys as the site said when submitting)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    version: int = VERSION
    job_id: str
    site: str = Field(max_length=200)
    remote_site: str = Field(max_length=200)
    login: LoginKeys
    submitted_at: str = Field(max_length=40)
    run_dir: str = Field(max_length=4096)
    code: dict[str, Any] | None = None

    @field_validator("job_id")
    @classmethod
    def _job_id(cls, v: str) -> str:
        if not is_job_id(v):
            raise ValueError(f"{v[:40]!r} is not a job id")
        return v

    @property
    def key(self) -> str:
        return f"{self.site}:{self.job_id}"


def remote_dir() -> Path:
    return records_dir().parent / "remote"


def _name(rec: LoginRecord) -> str:
    stamp = re.sub(r"[^0-9T]", "", rec.submitted_at)
    return f"{stamp}-{re.sub(r'[^A-Za-z0-9_.-]', '_', rec.site)}-{rec.job_id}.json"


def save(job_id: str, site: str, remote_site: str, login: LoginKeys, run_dir: str,
         code: dict[str, Any] | None) -> LoginRecord:
    rec = LoginRecord(job_id=job_id, site=site, remote_site=remote_site, login=login, submitted_at=now_utc(),
                      run_dir=run_dir, code=code)
    atomic_write_text(remote_dir() / _name(rec), rec.model_dump_json() + "\n")
    return rec


def _files() -> list[Path]:
    folder = remote_dir()
    if not folder.is_dir():
        return []
    names = []
    for i, path in enumerate(folder.glob("*.json")):
        if i >= _MAX_FILES:
            raise RecordError(f"{folder}: more than {_MAX_FILES} files; move old ones out of it")
        names.append(path)
    return sorted(names, key=lambda p: p.name)


def load(path: Path) -> LoginRecord:
    try:
        raw, cut = read_capped(path, _MAX_BYTES)
        if cut:
            raise RecordError(f"{path}: not a login job record (larger than {_MAX_BYTES >> 10} KiB)")
        data = json.loads(raw.decode("utf-8"))
        rec = LoginRecord.model_validate(data)
    except NotRegular as exc:
        raise RecordError(f"{path}: not a login job record ({exc.strerror})") from None
    except OSError as exc:
        raise RecordError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise RecordError(f"{path}: not a login job record (not JSON text)") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"]) or "(record)"
        raise RecordError(f"{path}: login job record: {loc}: {first['msg']}") from None
    if rec.version != VERSION:
        raise RecordError(f"{path}: login job record version {rec.version} (this clusterkit reads {VERSION})")
    return rec


def find(ref: str) -> LoginRecord | None:
    """The record named by ``JOB_ID`` or ``SITE:JOB_ID`` (the newest if an id repeats), or None."""
    site, _, job_id = ref.rpartition(":")
    if not is_job_id(job_id):
        return None
    base = job_id.split("_")[0]
    for path in reversed(_files()):
        if path.stem.endswith(f"-{job_id}") or path.stem.endswith(f"-{base}"):
            rec = load(path)
            if rec.job_id in (job_id, base) and (not site or rec.site == site):
                return rec
    return None


def latest() -> tuple[LoginRecord, str] | None:
    """The newest record and its submit time, or None when there is none."""
    files = _files()
    if not files:
        return None
    rec = load(files[-1])
    return rec, rec.submitted_at


def require(ref: str) -> LoginRecord:
    rec = find(ref)
    if rec is None:
        raise NoJobRecord(f"no job record for {ref!r} in {remote_dir()}")
    return rec
