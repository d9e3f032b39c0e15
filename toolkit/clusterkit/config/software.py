"""The site config's sections about what runs on the nodes: modules, the container, the NCCL
environment (:mod:`clusterkit.config.schema`)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from clusterkit.config.envrules import ENV_NAME, NCCL_ENV_NAMES, NCCL_ENV_PREFIXES, container_env_problem
from clusterkit.config.model import _Model


class Container(_Model):
    """The container each launcher runs in (pyxis: ``srun --container-*``; apptainer: ``apptainer exec``;
    singularity: the same with the ``singularity`` command, for sites that install SingularityCE)."""

    runtime: Literal["pyxis", "apptainer", "singularity"]
    image: str
    mounts: list[str] = Field(default_factory=list)
    env: dict[str, str | int] = Field(
        default_factory=dict, description="variables set inside the container over the image's own "
        "(pyxis: exported and named in --container-env; apptainer: APPTAINERENV_<NAME>; singularity: "
        "SINGULARITYENV_<NAME>)")
    name: str | None = Field(
        None, description="pyxis --container-name: the job's steps share one unpacked container")
    mount_home: bool | None = Field(
        None, description="mount the user's home: false adds --no-container-mount-home (pyxis) or --no-home "
        "(apptainer, singularity), true --container-mount-home (pyxis); unset: the runtime's own default")
    cache_dir: str | None = Field(
        None, description="shared storage where a registry image is staged once (pyxis: 'enroot import -o' to "
        "a squashfs; apptainer/singularity: 'build' to a SIF) by the job script on the batch host, then used by "
        "every node: <cache_dir>/<image key> when an admin staged it there (root-owned), else "
        "<cache_dir>/<you>/<image key>, made once and reused by your later jobs. pyxis steps then name a "
        "job-scoped container (--container-name) unless name is set")
    runscript: bool = Field(
        False, description="apptainer/singularity: start the launcher through the image's runscript ('run IMAGE "
        "LAUNCHER ...', the runscript given the launcher's words as its arguments) instead of 'exec IMAGE LAUNCHER'")

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, v: list[str]) -> list[str]:
        for m in v:
            if not m.startswith("/"):
                raise ValueError(f"mount {m!r} must be an absolute 'src[:dst]' path")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, Any]) -> dict[str, str]:
        for k, val in v.items():
            problem = container_env_problem(k)
            if problem:
                raise ValueError(problem)
            if "\x00" in str(val):
                raise ValueError(f"{k}: a value cannot hold a NUL byte")
            if len(f"{k}={val}".encode()) > 32 * 4096 - 1:
                raise ValueError(f"{k}: longer than {32 * 4096 - 1} bytes, which Linux refuses to pass to a process "
                                 "(MAX_ARG_STRLEN)")
        return {k: str(val) for k, val in v.items()}

    @field_validator("cache_dir")
    @classmethod
    def _cache_dir(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or not re.fullmatch(r"/[A-Za-z0-9._+/-]{0,511}", v)
                              or "/../" in v + "/"):
            raise ValueError(f"cache_dir {v!r}: an absolute path of letters, digits and '._+-/' (no '..')")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", v):
            raise ValueError(f"container name {v!r}: use 1-64 letters, digits, '.', '_' and '-'")
        return v

    @model_validator(mode="after")
    def _runtime_options(self) -> Container:
        if self.name is not None and self.runtime != "pyxis":
            raise ValueError(f"name is pyxis's --container-name; {self.runtime} exec has no named containers")
        if self.runscript and self.runtime == "pyxis":
            raise ValueError("runscript is for apptainer and singularity (their 'run'); pyxis runs the command "
                             "given, with the image's entrypoint left out")
        return self


class Software(_Model):
    driver_min: str | None = None
    cuda: str | None = None
    modules: list[str] = Field(default_factory=list)
    container: Container | None = None
    import_storm_nodes: int = Field(
        32, ge=1, description="warn above this many nodes when a job's --venv/--conda lives on shared storage: "
        "every rank's `import torch` opens ~2,000 files there at once (use an image, a squashfs or a node-local "
        "copy); see docs/admin.md")
    nccl_version: str | None = Field(None, description="the NCCL release the site's image (or module) carries, "
                                     "e.g. '2.21.5': the plan assumes it and the job warns when it finds another")

    @field_validator("driver_min", "cuda")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"\d+(\.\d+)*", v):
            raise ValueError(f"{v!r} is not a dotted version like '535.104'")
        return v

    @field_validator("nccl_version")
    @classmethod
    def _nccl_version(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"2\.\d{1,2}(\.\d{1,2})?", v):
            raise ValueError(f"{v!r} is not an NCCL version like '2.21.5' (or '2.21')")
        return v


class NCCL(_Model):
    env: dict[str, str | int] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _names(cls, v: dict[str, Any]) -> dict[str, str]:
        for k in v:
            if not ENV_NAME.fullmatch(k):
                raise ValueError(f"{k!r} is not an environment variable name")
            if not (k.startswith(NCCL_ENV_PREFIXES) or k in NCCL_ENV_NAMES):
                raise ValueError(f"{k}: nccl.env takes communication settings only: names starting with "
                                 f"{', '.join(NCCL_ENV_PREFIXES)} or one of {', '.join(NCCL_ENV_NAMES)}")
        return {k: str(val) for k, val in v.items()}
