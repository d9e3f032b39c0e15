"""Hostile values for the job's own flags (--env, --env-file, --setup, --node-setup, --venv,
--conda, --module): each arrives byte for byte where it is used, or is refused with one line
and nothing written.  bash itself reads the rendered words back."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from clusterkit.api import job_request
from clusterkit.errors import InputError
from tests.conftest import assert_one_line_error

MIB = "m" * (1024 * 1024)
VALUES = {
    "quotes": "it's \"both\" 'kinds'",
    "subst": "$(touch pwned) `touch pwned2` $IFS",   # ${IFS} in an --env value is refused (not expanded)
    "newlines": "line one\nline two\n; touch pwned3",
    "backslash": "a\\\\b\\",
    "unicode": "ünïcödé ✓ \u202e",
    "dash": "--leading-dashes",
}


def _render(ck, tmp: Path, *args: str):
    return ck("render", "--site", "testbed", "--out", str(tmp / "run"), *args, "--", "python", "t.py", cwd=tmp)


def _read_word(quoted: str) -> str:
    """What bash makes of one rendered shell word."""
    return subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True, text=True, check=True).stdout


def _no_marker(tmp: Path) -> None:
    assert not any(tmp.glob("pwned*")) and not any(Path.cwd().glob("pwned*"))


@pytest.mark.parametrize("name", sorted(VALUES))
def test_env_values_arrive_byte_for_byte(ck, tmp_path: Path, name: str) -> None:
    value = VALUES[name]
    result = _render(ck, tmp_path, "--env", f"HOSTILE={value}")
    assert result.code == 0, result.err
    text = (tmp_path / "run" / "job.sbatch").read_text()
    line = f"export HOSTILE={shlex.quote(value)}\n"
    assert line in text
    proc = subprocess.run(["bash", "-c", line + 'printf %s "$HOSTILE"'], capture_output=True, text=True,
                          cwd=tmp_path, check=True)
    assert proc.stdout == value
    _no_marker(tmp_path)


@pytest.mark.parametrize("flag", ["--setup", "--node-setup"])
@pytest.mark.parametrize("name", sorted(VALUES))
def test_setup_commands_arrive_byte_for_byte(ck, tmp_path: Path, flag: str, name: str) -> None:
    value = VALUES[name]
    result = _render(ck, tmp_path, flag, value)
    assert result.code == 0, result.err
    text = (tmp_path / "run" / "job.sbatch").read_text()
    word = shlex.quote(value)
    assert (f"eval {word}\n" if flag == "--setup" else f"bash -c {word}\n") in text
    assert _read_word(word) == value
    _no_marker(tmp_path)


@pytest.mark.parametrize("flag", ["--venv", "--conda"])
@pytest.mark.parametrize("name", sorted(VALUES))
def test_activation_names_arrive_byte_for_byte(ck, tmp_path: Path, flag: str, name: str) -> None:
    value = VALUES[name]
    result = _render(ck, tmp_path, flag, value)
    assert result.code == 0, result.err
    text = (tmp_path / "run" / "job.sbatch").read_text()
    word = shlex.quote(value + "/bin/activate" if flag == "--venv" else value)
    assert word in text and _read_word(word) == (value + "/bin/activate" if flag == "--venv" else value)
    _no_marker(tmp_path)


def test_a_one_mib_env_value_is_refused_with_the_reason(ck, tmp_path: Path) -> None:
    result = _render(ck, tmp_path, "--env", f"BIG={MIB}")
    assert_one_line_error(result, 2, "--env 'BIG=mmmm", "longer than 131071 bytes", "MAX_ARG_STRLEN")
    assert len(result.err) < 1000 and not (tmp_path / "run").exists()
    envfile = tmp_path / "big.env"
    envfile.write_text(f"OK=1\nBIG={MIB}\n")
    result = _render(ck, tmp_path, "--env-file", str(envfile))
    assert_one_line_error(result, 2, f"--env-file {envfile}:2:", "longer than")
    assert not (tmp_path / "run").exists()


def test_one_mib_setup_command_arrives_whole(ck, tmp_path: Path) -> None:
    command = "true " + MIB
    result = _render(ck, tmp_path, "--setup", command)
    assert result.code == 0, result.err
    assert f"eval {shlex.quote(command)}\n" in (tmp_path / "run" / "job.sbatch").read_text()


def test_nul_bytes_are_refused(tmp_path: Path) -> None:
    # a command line cannot carry NUL (exec refuses it); the API and env files can
    for kwargs in ({"env": {"A": "x\0y"}}, {"env": ["A=x\0y"]}, {"setup": ["echo\0rm"]},
                   {"node_setup": ["a\0"]}, {"modules": ["gcc\0"]}, {"venv": "/v\0x"}, {"conda": "c\0"}):
        with pytest.raises(InputError) as err:
            job_request(["python", "t.py"], **kwargs)  # type: ignore[arg-type]
        assert err.value.field == next(iter(kwargs))
    envfile = tmp_path / "nul.env"
    envfile.write_bytes(b"A=1\nB=x\x00y\n")
    with pytest.raises(InputError) as err:
        job_request(["python", "t.py"], env_file=envfile)
    assert str(err.value).startswith(f"env_file={envfile}:2: ")


def test_env_file_that_is_not_a_file_or_too_big_is_refused(ck, tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo.env"
    os.mkfifo(fifo)
    result = _render(ck, tmp_path, "--env-file", str(fifo))
    assert_one_line_error(result, 2, "--env-file", "cannot read it")
    big = tmp_path / "big.env"
    big.write_text("A=1\n" * (1024 * 1024 + 1))
    result = _render(ck, tmp_path, "--env-file", str(big))
    assert_one_line_error(result, 2, "--env-file", "larger than 4 MiB")
    bad = tmp_path / "latin1.env"
    bad.write_bytes(b"A=1\nB=caf\xe9\n")
    result = _render(ck, tmp_path, "--env-file", str(bad))
    assert_one_line_error(result, 2, f"--env-file {bad}:2", "not UTF-8")


def test_newline_in_a_name_or_env_file_path_stays_in_its_line(ck, tmp_path: Path) -> None:
    result = _render(ck, tmp_path, "--env", "A\nB=1")
    assert_one_line_error(result, 2, "--env", "is not an environment variable name")
    odd = tmp_path / "odd\nname.env"
    odd.write_text("A=1\n")
    result = _render(ck, tmp_path, "--env-file", str(odd))
    assert result.code == 0, result.err
    nccl = (tmp_path / "run" / "nccl.env").read_text()
    assert "A=1  # job: the job's environment (--env-file '" in nccl and "\\nname.env':1)" in nccl
    assert subprocess.run(["bash", "-n", str(tmp_path / "run" / "nccl.env")]).returncode == 0
