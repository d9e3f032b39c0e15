"""``clusterkit sites``: list, show, validate site configs; print their JSON Schema; write one
from the live cluster or an example site (``init``) and catch drift (``drift``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from clusterkit.errors import ConfigError
from clusterkit.vocab import PROBE_TRANSPORTS

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem


@click.group()
def sites() -> None:
    """Site configs: one YAML file per cluster.

    SITE is a file path or a name looked up, first hit wins, in ./site_configs,
    $CLUSTERKIT_SITES (colon-separated), ~/.config/clusterkit/sites,
    /etc/clusterkit/sites, and the sites built into clusterkit.
    """


@sites.command("list", short_help="List the sites on the search path and where each comes from.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_(as_json: bool) -> None:
    """List the sites on the search path, and where each comes from.

    The sites built into clusterkit but local are examples, marked "built-in example" ("example"
    in --json).  One shadowed by a site of the same name is listed once, as the site that wins
    (--json lists every file, each with "shadowed").
    """
    from clusterkit.api import Site, sites
    from clusterkit.cli import output

    rows = []
    for entry in sites():
        row = {"name": entry.name, "path": str(entry.path), "from": entry.origin, "shadowed": entry.shadowed}
        try:
            s = Site.load_file(entry.path).config
            row.update(valid=True, scheduler=s.scheduler.kind, nodes=s.nodes.nodelist,
                       gpus_per_node=s.nodes.gpus_per_node, fabric=s.network.fabric, description=s.description)
        except ConfigError as exc:
            row.update(valid=False, error=exc.lines()[0])
        row["example"] = entry.origin == "built-in" and entry.name != "local"
        rows.append(row)
    if as_json:
        output.emit_json(rows)
        return
    for r in rows:   # the sites shipped with clusterkit are examples (local: this machine), not the admin's
        if r["example"]:
            r["from"] = "built-in example"
    shown = [r for r in rows if not (r["shadowed"] and str(r["from"]).startswith("built-in"))]
    columns = ["site", "from", "scheduler", "nodes", "gpus/node", "fabric", "description"]
    table = [[f"{r['name']}{' (shadowed)' if r['shadowed'] else ''}", r["from"], r.get("scheduler", "INVALID"),
              r.get("nodes", ""), r.get("gpus_per_node", ""), r.get("fabric", ""),
              r.get("description", r.get("error", ""))] for r in shown]
    origins = {r["from"] for r in shown}
    title = None
    if output.is_terminal() and len(origins) == 1:  # on a terminal one origin is a title, not a column
        title = f"sites from {origins.pop()}"
        columns.pop(1)
        table = [row[:1] + row[2:] for row in table]
    output.print_table(title, columns, table, keys=("site", "nodes"))


@sites.command(short_help="Show a site with extends merged and defaults filled in.")
@click.argument("site")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON instead of YAML.")
def show(site: str, as_json: bool) -> None:
    """Show a site as clusterkit sees it: extends merged, defaults filled in."""
    import yaml

    from clusterkit.api import Site
    from clusterkit.cli import output
    from clusterkit.job.render import override_note

    s = Site.load(site)
    data = s.to_dict()
    if as_json:
        output.emit_json({"source": s.source, "site": data, "templates_overridden": s.overridden_templates})
        return
    click.echo(f"# {s.name}: from {s.source}")
    note = override_note(s.config)
    if note:
        click.echo(f"# {note}")
    click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())


@sites.command(short_help="Validate site files; every problem as file:line: key.")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
def validate(paths: tuple[str, ...], as_json: bool) -> None:
    """Validate site config files; report every problem as file:line: key: message (exit 2).

    A file named _*.yaml is a partial config (pulled in with `extends:`): it is validated as a
    fragment, what it sets must be valid, the keys every site needs may be left out. Errors
    are printed first, then the files that are valid.
    """
    from clusterkit.api import Site
    from clusterkit.cli import output, report_error

    results, problems = [], []
    for path in paths:
        try:
            partial = Site.check_partial(path)
            name = None if partial else Site.load_file(path).name
            results.append({"path": path, "valid": True, "partial": partial, "name": name, "errors": []})
        except ConfigError as exc:
            results.append({"path": path, "valid": False, "partial": Path(path).name.startswith("_"),
                            "errors": exc.lines()})
            problems.extend(exc.issues)
    if as_json:
        output.emit_json(results)
        if problems:
            raise click.exceptions.Exit(2)
        return
    if problems:
        report_error(ConfigError(problems))
    for r in results:
        if r["valid"]:
            click.echo(f"{r['path']}: ok ({'partial config' if r['partial'] else r['name']})")
    if problems:
        raise click.exceptions.Exit(2)


@sites.command(short_help="Print the JSON Schema of site files (for editors).")
def schema() -> None:
    """Print the JSON Schema of site configs (for editors: yaml-language-server, VS Code)."""
    from clusterkit.api import Site

    click.echo(json.dumps(Site.schema(), indent=2, sort_keys=True))


DRIFT_EXIT_HELP = """\b
Exit codes:
  0  no drift
  1  drift found
  2  usage or config error (bad option, invalid site config)
  3  could not reach the Slurm controller or some nodes
When several apply, 2 wins over 3 over 1.
"""


INIT_EXIT_HELP = """\b
Exit codes:
  0  site config written (or printed)
  2  usage or config error (bad option, unknown partition or example, several
     node types)
  3  could not reach the Slurm controller, or --probe could not reach some
     nodes
"""


def _complete_example(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    from click.shell_completion import CompletionItem

    from clusterkit.config.load import builtin_sites_dir

    return [CompletionItem(p.stem) for p in sorted(builtin_sites_dir().glob("*.yaml"))
            if not p.name.startswith("_") and p.stem.startswith(incomplete)]


@sites.command("init", epilog=INIT_EXIT_HELP,
               short_help="Write a commented site file from Slurm or an example.")
@click.argument("name")
@click.option("--from-slurm", "from_slurm", is_flag=True,
              help="Read the cluster through scontrol (show config, partition, node).")
@click.option("--from-example", "example", default=None, metavar="EXAMPLE", shell_complete=_complete_example,
              help="Start from a shipped example site (eth-nfs, ib-h100, roce-a100, ...), comments kept; "
                   "no Slurm needed.")
@click.option("--partition", default=None, help="The partition to describe (default: Slurm's default partition).")
@click.option("--nodelist", "nodes", default=None, metavar="HOSTLIST",
              help="Only these nodes (picks one node type of a mixed partition).")
@click.option("--nodes", "old_nodes", default=None, metavar="HOSTLIST", hidden=True,
              help="Deprecated spelling of --nodelist (--nodes is a number of nodes elsewhere).")
@click.option("--probe", "probe_with", type=click.Choice(PROBE_TRANSPORTS), default=None,
              help="Also read GPUs, driver, HCAs, interfaces and mounts on every node.")
@click.option("--out", default=None, type=click.Path(),
              help="Write the site file here (default: print it); a partial it extends is written beside it.")
def init(name: str, from_slurm: bool, example: str | None, partition: str | None, nodes: str | None,
         old_nodes: str | None, probe_with: str | None, out: str | None) -> int:
    """Write a commented, valid site config NAME: from the live Slurm cluster (--from-slurm),
    or from one of clusterkit's example sites (--from-example), to edit by hand.

    \b
    Examples:
      clusterkit sites init mine --from-slurm --out site_configs/mine.yaml
      clusterkit sites init mine --from-example ib-h100 --out site_configs/m.yaml
    """
    from pathlib import Path

    from clusterkit.api import Site
    from clusterkit.cli.common import nodelist_option
    from clusterkit.errors import InputError
    from clusterkit.sites.admin import write_companions, write_new

    nodes = nodelist_option(nodes, old_nodes)
    if from_slurm == (example is not None):
        raise InputError("sites init needs one of --from-slurm or --from-example EXAMPLE")
    if example is not None:
        stray = [o for o, v in (("--partition", partition), ("--nodelist", nodes), ("--probe", probe_with)) if v]
        if stray:
            raise InputError(f"{', '.join(stray)} only make sense with --from-slurm")
        draft = Site.init_from_example(name, example)
    else:
        draft = Site.init_from_slurm(name, partition=partition, nodes=nodes, probe_with=probe_with)
    if out:
        write_new(Path(out), draft.text)
        click.echo(f"wrote {out}", err=True)
        for companion in write_companions(Path(out), draft):
            click.echo(f"wrote {companion} (the partial config {Path(out).name} extends)", err=True)
    else:
        click.echo(draft.text, nl=False)
        for file in draft.companions:
            click.echo(f"clusterkit: note: it extends {file}, a partial config that --out writes beside it", err=True)
    for item in draft.missing:
        click.echo(f"clusterkit: fill in: {item}", err=True)
    for item in draft.unverified:
        click.echo(f"clusterkit: unverified: {item}", err=True)
    for host, why in draft.unreachable.items():
        click.echo(f"clusterkit: error: could not probe {host}: {why}", err=True)
    return 3 if draft.unreachable else 0


@sites.command(epilog=DRIFT_EXIT_HELP, short_help="Compare site files with the live cluster, key by key.")
@click.argument("refs", nargs=-1, metavar="SITE...")
@click.option("--all", "every", is_flag=True,
              help="Every site on the search path whose scheduler.cluster is this cluster.")
@click.option("--probe", "probe_with", type=click.Choice(PROBE_TRANSPORTS), default=None,
              help="Also compare driver, HCAs, port rate and mounts on every node.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--write", is_flag=True,
              help="Put the live facts (nodelist, GPUs, CPUs, memory, HCAs) into the site file; print the diff.")
@click.option("--dry-run", is_flag=True, help="Print the diff --write would apply, and nothing else.")
def drift(refs: tuple[str, ...], every: bool, probe_with: str | None, as_json: bool, write: bool, dry_run: bool) -> int:
    """Compare site configs with the live cluster, key by key."""
    from clusterkit.api import drift as drift_sites
    from clusterkit.cli import output, report_error
    from clusterkit.sites.show import print_run
    from clusterkit.tooltext import printable_lines

    result = drift_sites(refs, every=every, probe_with=probe_with, write=write, dry_run=dry_run)
    if as_json:
        output.emit_json(result.to_json())
    elif dry_run:
        click.echo(printable_lines("".join(result.diffs.values())), nl=False)
    else:
        print_run(result)
    for err in result.errors:
        report_error(err)
    return result.exit_code
