"""``clusterkit plan``: which framework, ZeRO stage and node count fit a model on a site.

The numbers come from :mod:`clusterkit.sizing` (pure); this module only reads the site,
calls it, and renders the result as a table (rich on a terminal, plain columns in a pipe) or
JSON.  With ``--render`` the recommended setup goes straight to the render path.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import click

from clusterkit import sizing as est
from clusterkit.cli.common import site_option_named
from clusterkit.errors import InputError
from clusterkit.job import goodput

if TYPE_CHECKING:
    from clusterkit.config.schema import Site as SiteConfig
    from clusterkit.sizing.candidates import Candidate


# click.ParamType is generic from click 8.4 (one parameter; two from 8.5) and plain before, so no
# spelling type-checks on every click>=8.1: the ignores below are needed from 8.4 on.
class _Size(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.4, see above
    """A parameter count (``7B``, ``70e9``, ``350M``); bad input is a one-line InputError."""

    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        return est.parse_size(str(value), f"--{param.name.replace('_', '-')}" if param and param.name else "size")


MAX_NUMBER = 10**18  # any numeric option; each has its own, lower, bound where one is needed


class _Number(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.4, see above
    """An int or float option whose bad values are one-line UsageErrors (not click's usage block)."""

    def __init__(self, kind: type) -> None:
        self.kind = kind
        self.name = "N" if kind is int else "X"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, self.kind):
            return value
        opt = f"--{param.name.replace('_', '-')}" if param and param.name else "value"
        try:
            number = self.kind(str(value))
        except ValueError:
            what = "a whole number" if self.kind is int else "a number"
            raise InputError(f"{opt}: {str(value)[:40]!r} is not {what}") from None
        if isinstance(number, float) and not math.isfinite(number):  # --json would print NaN / Infinity
            raise InputError(f"{opt}: {value!r} is not a finite number")
        if abs(number) > MAX_NUMBER:  # a 400-digit integer: no float holds it, no figure would
            raise InputError(f"{opt}: {str(value)[:40]!r} is larger than {MAX_NUMBER:.0e}")
        return number


@click.command("plan", context_settings={"help_option_names": ["-h", "--help"]})
@site_option_named("site_ref")
@click.option("--model-params", type=_Size(), required=True, help="Model size: 7B, 70e9, 350M, 1.5T or a plain count.")
@click.option("--largest-layer-params", type=_Size(), default=None,
              help="Parameters of the largest layer (ZeRO-3 gathers one whole layer per GPU). "
                   "Default: guessed from a GPT-3-shaped model.")
@click.option("--gpus", type=_Number(int), default=None,
              help="Fix the GPU count (a multiple of the site's GPUs per node).")
@click.option("--nodes", type=_Number(int), default=None, help="Fix the node count.")
@click.option("--launcher", type=click.Choice(est.LAUNCHERS), default=None, metavar="NAME",
              help=f"Only setups this launcher can run: {', '.join(est.LAUNCHERS)}.")
@click.option("--offload", type=click.Choice(est.OFFLOADS), default=None, help="Only setups with this CPU offload.")
@click.option("--zero-init/--no-zero-init", default=True, show_default=True,
              help="ZeRO-3/FSDP build the model sharded (deepspeed.zero.Init / meta device) "
                   "rather than whole on every rank.")
@click.option("--seq-len", type=_Number(int), default=None,
              help="Sequence length: count activations too (full recomputation, FlashAttention).")
@click.option("--micro-batch", type=_Number(int), default=None, help="With --seq-len: micro batch per GPU (default 1).")
@click.option("--hidden-size", type=_Number(int), default=None,
              help="With --seq-len: hidden size (default: from a GPT-3 shape).")
@click.option("--layers", type=_Number(int), default=None,
              help="With --seq-len: transformer layers (default: from a GPT-3 shape).")
@click.option("--vocab-size", type=_Number(int), default=None,
              help=f"With --seq-len: vocabulary size (default {est.DEFAULT_VOCAB}).")
@click.option("--headroom", type=_Number(float), default=est.DEFAULT_HEADROOM, show_default=True,
              help="Fraction of GPU and host memory kept free for activations, CUDA context and buffers.")
@click.option("--buffer-factor", type=_Number(float), default=est.BUFFER_FACTOR, show_default=True,
              help="DeepSpeed's additional_buffer_factor on host-memory figures.")
@click.option("--hours", type=_Number(float), default=None, help="Wall time, for a GPU-hours and cost line.")
@click.option("--keep-checkpoints", type=_Number(int), default=2, show_default=True, metavar="N",
              help="Checkpoints kept at once: checked against the checkpoint directory's free space and inodes.")
@click.option("--save-s", type=_Number(float), default=None, metavar="S",
              help="Seconds one checkpoint save takes, for the cadence (default: the site's "
                   "reliability.checkpoint_save_s; status --run measures it).")
@click.option("--restart-s", type=_Number(float), default=None, metavar="S",
              help="Seconds from a failure to training again, for the cadence (default: the site's "
                   "reliability.restart_s; bench/recovery.py and status --run measure it).")
@click.option("--json", "as_json", is_flag=True, help="Print the estimate as JSON.")
@click.option("--render", "do_render", is_flag=True,
              help="Render the recommended setup into a run directory (as `clusterkit render`), for COMMAND.")
@click.option("--out", default=None, metavar="DIR", help="With --render: run directory to create.")
@click.option("--job-name", default=None, help="With --render: Slurm job name.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="With --render: extra job settings (as `render --set`); they win over the plan's.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def plan(site_ref: str, model_params: int, largest_layer_params: int | None, gpus: int | None,
         nodes: int | None, launcher: str | None, offload: str | None, zero_init: bool,
         seq_len: int | None, micro_batch: int | None, hidden_size: int | None, layers: int | None,
         vocab_size: int | None, headroom: float, buffer_factor: float, hours: float | None,
         keep_checkpoints: int, save_s: float | None, restart_s: float | None, as_json: bool, do_render: bool,
         out: str | None, job_name: str | None, sets: tuple[str, ...], command: tuple[str, ...]) -> None:
    """Choose framework, ZeRO stage and node count from model size and the site's GPUs.

    Memory is for model states (weights, gradients, optimizer states: Adam, mixed precision),
    matching DeepSpeed's own ZeRO-2/3 estimators; activations are left to --headroom.
    Sizes are decimal (7B = 7e9); memory is GiB, and the site's gpu_mem_gb and mem_gb are
    read as GiB.

    \b
    Examples:
      clusterkit plan --site ib-h100 --model-params 7B
      clusterkit plan --site ib-h100 --model-params 176B --nodes 16 --hours 24
      clusterkit plan --site ib-h100 --model-params 13B --render -- python t.py
    """
    from clusterkit.api import Site

    _check_render_options(do_render, command, out, job_name, sets)
    shape = _shape(model_params, seq_len, micro_batch, hidden_size, layers, vocab_size)
    site = Site.load(site_ref)
    request = est.SizingRequest(
        total_params=model_params, largest_layer_params=largest_layer_params, gpus=gpus, nodes=nodes,
        launcher=launcher, offload=offload, zero_init=zero_init, headroom=headroom,
        buffer_factor=buffer_factor, hours=hours, shape=shape)
    result = site.size(request)
    if keep_checkpoints < 1:
        raise InputError(f"--keep-checkpoints {keep_checkpoints}: keep at least 1")
    chosen = result.recommended
    capacity = site.checkpoint_capacity(model_params, chosen.layout.gpus if chosen else 1, keep_checkpoints)
    cadence = _cadence(site.config, chosen.layout.gpus if chosen else None, save_s, restart_s)
    run = None
    if do_render:
        from clusterkit.cli.common import build_request

        user = build_request(stage="single-node", command=command, launcher=None, nodes=None, gpus_per_node=None,
                             sets=sets, job_name=job_name, exclude=None, debug=False)
        run = site.render_sized(result, command, out=out, job_name=job_name, settings=user.settings,
                                origin=user.origin, keep_checkpoints=keep_checkpoints)
    if as_json:
        from clusterkit.cli import output
        from clusterkit.cli.render import job_json

        doc = result.to_dict()
        doc["site"] = {"name": site.name, **cast("dict[str, object]", doc["site"])}
        # the same document as `render --json` (its choices among it)
        doc["rendered"] = job_json(run, dry_run=False) if run is not None else None
        doc["checkpoint_capacity"] = capacity.to_dict()   # its verdict and message, no warning line
        doc["cadence"] = cadence.to_dict() if cadence is not None else None
        output.emit_json(doc)
        return
    print_human(site.name, result)
    from clusterkit.cli import output as out_

    if capacity.verdict in ("too-small", "tight"):
        out_.warn(capacity.message)
    else:
        out_.line(capacity.message)
    if cadence is not None:
        out_.line(cadence.worded())
    if run is not None:
        from clusterkit.cli.render import show_rendered

        show_rendered(run, as_json=False)


def _cadence(site: SiteConfig, gpus: int | None, save_s: float | None,
             restart_s: float | None) -> goodput.Cadence | None:
    """How often the recommended setup should checkpoint (:mod:`clusterkit.job.goodput`), the
    site's reliability figures unless given; None where nothing was recommended."""
    rel = site.reliability
    for name, value, low in (("--save-s", save_s, 0.0), ("--restart-s", restart_s, -1.0)):
        if value is not None and not low < value <= 86400:
            raise InputError(f"{name} {value:g}: seconds, {'above' if low == 0 else 'at least'} 0 and at most 86400")
    if gpus is None:
        return None
    return goodput.cadence(gpus, rel.gpu_failures_per_hour, rel.checkpoint_save_s if save_s is None else save_s,
                           rel.restart_s if restart_s is None else restart_s)


def _shape(params: int, seq_len: int | None, micro_batch: int | None, hidden: int | None,
           layers: int | None, vocab: int | None) -> est.Shape | None:
    """The model shape for activations: only with --seq-len; the other sizes refine it."""
    if seq_len is None:
        given = [name for name, v in (("--micro-batch", micro_batch), ("--hidden-size", hidden),
                                      ("--layers", layers), ("--vocab-size", vocab)) if v is not None]
        if given:
            raise InputError(f"{', '.join(given)} only make sense with --seq-len")
        return None
    for name, value in (("--seq-len", seq_len), ("--micro-batch", micro_batch), ("--hidden-size", hidden),
                        ("--layers", layers), ("--vocab-size", vocab)):
        if value is not None and value < 1:
            raise InputError(f"{name} {value}: must be at least 1")
    return est.make_shape(params, seq_len, micro_batch or 1, hidden, layers, vocab)


def _check_render_options(do_render: bool, command: tuple[str, ...], out: str | None,
                          job_name: str | None, sets: tuple[str, ...]) -> None:
    """COMMAND and the render options belong with --render, and --render needs a COMMAND."""
    if do_render and not command:
        raise InputError("--render needs the training command after --, e.g. -- python train.py")
    if not do_render:
        stray = [name for name, value in (("--out", out), ("--job-name", job_name), ("--set", sets)) if value]
        if command:
            stray.append(f"command {' '.join(command)!r}")
        if stray:
            raise InputError(f"{', '.join(stray)} only make sense with --render")


def render_hint(site_name: str, chosen: Candidate) -> list[str]:
    """What to type to run the recommendation: every ``--set`` is one its launcher takes; what
    reaches the training script, and what the launcher leaves to it, is said plainly."""
    from clusterkit.job.settings import script_variable

    lay, launcher = chosen.layout, chosen.method.launcher
    taken, script = chosen.set_args()
    words = ["clusterkit", "render", "--site", site_name, "--stage", lay.stage, "--nodes", str(lay.nodes),
             "--launcher", launcher, *(w for pair in taken for w in ("--set", pair)), "--", "COMMAND"]
    lines = [f"render it: {' '.join(words)}  (or: plan ... --render -- COMMAND)"]
    for pair in taken:
        variable = script_variable(pair.partition("=")[0], launcher)
        if variable is not None:
            lines.append(f"  {launcher} passes {pair} to the training script as ${variable}: the script acts on it")
    if script:
        lines.append(f"  the training script chooses (the {launcher} launcher does not act on it): {', '.join(script)}")
    return lines


def print_human(site_name: str, result: est.Sizing) -> None:
    """The table of candidates, the recommendation with its reason, and the cost line."""
    from clusterkit.cli import output

    console = output.out()
    hw, req = result.hardware, result.request
    llp = est.human_count(result.largest_layer_params) + (" (assumed)" if result.largest_layer_assumed else "")
    console.print(f"site {site_name}: {hw.max_nodes} nodes x {hw.gpus_per_node} GPUs, {hw.gpu_mem_gib:g} GiB per GPU, "
                  f"{hw.host_mem_gib:g} GiB host per node; headroom {req.headroom:.0%} leaves "
                  f"{result.usable_gpu_bytes / est.GIB:.1f} GiB per GPU, "
                  f"{result.usable_host_bytes / est.GIB:.1f} GiB per node")
    console.print(f"model: {est.human_count(req.total_params)} parameters, largest layer {llp}")
    if req.shape is not None:
        sh = req.shape
        guessed = f" (assumed: {', '.join(sh.assumed)})" if sh.assumed else ""
        console.print(f"activations: sequence {sh.seq_len} x micro batch {sh.micro_batch}, hidden {sh.hidden}, "
                      f"{sh.layers} layers, vocabulary {sh.vocab}{guessed}; full recomputation, FlashAttention")
    columns = ["", "setup", "launcher", "size", "stage", "GiB/GPU"] + (
        ["+act GiB"] if req.shape else []) + ["GiB/node", "fits"]
    rows = []
    for c in result.candidates:
        mark = "*" if result.recommended is c else ""
        fits = "yes" if c.fits else ("no: GPU" if not c.fits_gpu else "no: host")
        act = [f"{c.act_bytes / est.GIB:.2f}"] if req.shape else []
        rows.append([mark, c.method.label, c.method.launcher, c.describe_size(), c.layout.stage,
                     f"{c.gpu_bytes / est.GIB:.2f}", *act, f"{c.host_bytes / est.GIB:.2f}", fits])
    # setup and size fold to fit the terminal; the figures, launcher, stage and verdict stay whole
    output.print_table(None, columns, rows, keys=[c for c in columns if c not in ("setup", "size")],
                       right=[c for c in columns if "GiB" in c], drop=("stage", "launcher"))
    if result.recommended is not None:
        console.print(f"recommended: {result.recommended.method.label} on {result.recommended.describe_size()}, "
                      f"stage {result.recommended.layout.stage}")
        for line in render_hint(site_name, result.recommended):
            console.print(line)
    else:
        console.print("recommended: none (nothing fits)")
    console.print(f"why: {result.reason}")
    if result.gpu_hours is not None:
        line = f"cost: {result.gpu_hours:g} GPU-hours for {req.hours:g} h"
        if result.cost is not None:
            line += f" = {result.cost:,.2f} {hw.currency} at {hw.gpu_hour_price:g} {hw.currency}/GPU-hour"
        console.print(line)
