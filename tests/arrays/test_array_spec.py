"""``--array`` and ``--sweep``: Slurm's array syntax checked, the sweep's product, and the sweep's
values reaching the training command as data (run through bash, never evaluated)."""

from __future__ import annotations

import subprocess

import pytest

from clusterkit.errors import InputError, PlanError
from clusterkit.job import array as arrays


@pytest.mark.parametrize("spec,indices,throttle", [
    ("0-3", (0, 1, 2, 3), None), ("0-15%4", tuple(range(16)), 4), ("1,3,5", (1, 3, 5), None),
    ("0-30:10", (0, 10, 20, 30), None), ("7", (7,), None), ("0-2,10-11%1", (0, 1, 2, 10, 11), 1),
])
def test_slurm_array_syntax_parses_to_its_indices(spec: str, indices: tuple[int, ...], throttle: int | None) -> None:
    got = arrays.parse_spec(spec)
    assert (got.text, got.indices(), got.throttle) == (spec, indices, throttle)


@pytest.mark.parametrize("spec,words", [
    ("", "give the task indices"), ("%4", "give the task indices"), ("0-3%0", "throttle"), ("0-3%x", "throttle"),
    ("3-1", "is empty"), ("0-9:0", "is empty"), ("a-b", "is not an index"), ("0-3;rm", "is not an index"),
    ("-1", "is not an index"), ("0-4000001", "past Slurm's largest array index"), ("1,1", "listed twice"),
    ("0-3\n#SBATCH --x", "is not an index"),
])
def test_bad_array_specs_are_refused_naming_the_option(spec: str, words: str) -> None:
    with pytest.raises(InputError) as err:
        arrays.parse_spec(spec)
    assert err.value.problems[0].field == "array" and words in str(err.value), str(err.value)


@pytest.mark.parametrize("items,words", [
    (["lr"], "give KEY=V1,V2"), (["1lr=1"], "give KEY=V1,V2"), (["l-r=1"], "give KEY=V1,V2"),
    (["lr=1,,2"], "a value is empty"), (["lr="], "a value is empty"), (["lr=1", "LR=2"], "swept twice"),
    (["lr=1\n2"], "control characters"), (["lr=1,1"], "listed twice"),
])
def test_bad_sweeps_are_refused_naming_the_option(items: list[str], words: str) -> None:
    with pytest.raises(InputError) as err:
        arrays.parse_sweep(items)
    assert err.value.problems[0].field == "sweep" and words in str(err.value), str(err.value)


def test_a_sweep_is_the_cartesian_product_numbered_from_zero() -> None:
    ask = arrays.request("%2", ["lr=0.1,0.2", "seed=1,2,3"])
    assert ask is not None
    arr = arrays.plan(ask, slurm=True, site="s", max_array_size=None)
    assert arr.spec == "0-5%2" and arr.indices == tuple(range(6)) and arr.throttle == 2
    assert [arr.task_values(i) for i in (0, 1, 3, 5)] == [
        {"lr": "0.1", "seed": "1"}, {"lr": "0.1", "seed": "2"}, {"lr": "0.2", "seed": "1"}, {"lr": "0.2", "seed": "3"}]


def test_a_sweep_takes_only_a_throttle_from_array() -> None:
    with pytest.raises(InputError, match="give only a throttle"):
        arrays.request("0-3", ["lr=1,2"])


def test_an_index_at_max_array_size_is_refused_and_one_below_passes() -> None:
    ask = arrays.request("0-999", [])
    assert ask is not None
    assert arrays.plan(ask, slurm=True, site="s", max_array_size=1000).size == 1000
    with pytest.raises(PlanError, match=r"largest index 1000 past MaxArraySize 1000"):
        arrays.plan(arrays.request("0-1000", []) or ask, slurm=True, site="s", max_array_size=1000)
    # a local site runs the tasks one after another: Slurm's MaxArraySize does not apply there
    wide = arrays.request("0-1000", []) or ask
    assert arrays.plan(wide, slurm=False, site="laptop", max_array_size=1000).size == 1001


HOSTILE = ["$(touch pwned)", "a b", "it's", '"; touch pwned; "', "*", "`id`", "=x", "-n"]


def test_sweep_values_reach_env_and_argv_as_data(tmp_path) -> None:
    """The job script's own lines (the case on the index and the command words), run by bash:
    every value arrives byte for byte, nothing in it runs, no file appears."""
    ask = arrays.request(None, ["v=" + ",".join(HOSTILE)])
    assert ask is not None
    arr = arrays.plan(ask, slurm=True, site="s", max_array_size=None)
    words = arrays.command_words(["train.py", "--v", "{v}", "--tag", "x-{v}-{unswept}", "{v}{v}"], arr.keys)
    script = ("case \"$CK_ARRAY_INDEX\" in\n" + "\n".join(arrays.case_lines(arr)) + "\nesac\n"
              f"ck_cmd=({' '.join(words)})\n" 'printf "%s\\0" "$CK_SWEEP_V" "${ck_cmd[@]}"\n')
    for index, value in enumerate(HOSTILE):
        env = {"CK_ARRAY_INDEX": str(index), "PATH": "/usr/bin:/bin"}
        out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                             check=True).stdout
        assert out.split("\0")[:-1] == [value, "train.py", "--v", value, "--tag", f"x-{value}-{{unswept}}",
                                        value + value], (value, out)
    assert list(tmp_path.iterdir()) == []
