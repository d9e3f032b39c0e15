"""``clusterkit sites``: list, show, validate site configs; print their JSON Schema."""

from __future__ import annotations

import json

import click

from clusterkit.errors import ConfigError


@click.group()
def sites() -> None:
    """Site configs: one YAML file per cluster.

    SITE is a file path or a name looked up, first hit wins, in ./site_configs,
    $CLUSTERKIT_SITES (colon-separated), ~/.config/clusterkit/sites,
    /etc/clusterkit/sites, and the sites built into clusterkit.
    """


@sites.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_(as_json: bool) -> None:
    """List the sites on the search path, and where each comes from."""
    from clusterkit import output
    from clusterkit.site import list_sites, load_file

    rows = []
    for entry in list_sites():
        row = {"name": entry.name, "path": str(entry.path), "from": entry.origin, "shadowed": entry.shadowed}
        try:
            s = load_file(entry.path)
            row.update(valid=True, scheduler=s.scheduler.kind, nodes=s.nodes.nodelist,
                       gpus_per_node=s.nodes.gpus_per_node, fabric=s.network.fabric, description=s.description)
        except ConfigError as exc:
            row.update(valid=False, error=exc.lines()[0])
        rows.append(row)
    if as_json:
        output.emit_json(rows)
        return
    output.print_table(None, ["site", "from", "scheduler", "nodes", "gpus/node", "fabric", "description"], [
        (f"{r['name']}{' (shadowed)' if r['shadowed'] else ''}", r["from"], r.get("scheduler", "INVALID"),
         r.get("nodes", ""), r.get("gpus_per_node", ""), r.get("fabric", ""), r.get("description", r.get("error", "")))
        for r in rows])


@sites.command()
@click.argument("site")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON instead of YAML.")
def show(site: str, as_json: bool) -> None:
    """Show a site as clusterkit sees it: extends merged, defaults filled in."""
    import yaml

    from clusterkit import output
    from clusterkit.site import load_site

    from clusterkit.render import override_note, overridden

    s = load_site(site)
    data = s.model_dump(mode="json")
    if as_json:
        output.emit_json({"source": s.source, "site": data, "templates_overridden": overridden(s)})
        return
    click.echo(f"# {s.name}: from {s.source}")
    note = override_note(s)
    if note:
        click.echo(f"# {note}")
    click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())


@sites.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
def validate(paths: tuple[str, ...], as_json: bool) -> None:
    """Validate site config files; report every problem as file:line: key: message (exit 2)."""
    from clusterkit import output
    from clusterkit.site import load_file

    results, problems = [], []
    for path in paths:
        try:
            s = load_file(path)
            results.append({"path": path, "valid": True, "name": s.name, "errors": []})
        except ConfigError as exc:
            results.append({"path": path, "valid": False, "errors": exc.lines()})
            problems.extend(exc.issues)
    if as_json:
        output.emit_json(results)
    else:
        for r in results:
            if r["valid"]:
                click.echo(f"{r['path']}: ok ({r['name']})")
    if problems:
        if as_json:
            raise click.exceptions.Exit(2)
        raise ConfigError(problems)


@sites.command()
def schema() -> None:
    """Print the JSON Schema of site configs (for editors: yaml-language-server, VS Code)."""
    from clusterkit.site import json_schema

    click.echo(json.dumps(json_schema(), indent=2, sort_keys=True))
