"""``clusterkit nodes``: the node history of a site, from Python."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit.config.history_keys import NodeHistoryKeys

if TYPE_CHECKING:
    from clusterkit.history.store import Event
    from clusterkit.history.summary import NodeSummary
    from clusterkit.scheduler.records import RecordStore

    from .site import Site


@dataclass(frozen=True)
class NodeHistory:
    """A site's nodes that failed, each with its count, last failure, verdicts and jobs."""

    site: str
    path: Path                        #: the history file (``<state>/nodes/<site>.json``)
    keys: NodeHistoryKeys             #: the site's ``node_history:`` keys
    nodes: tuple[NodeSummary, ...]    #: most recent hardware failures first
    warnings: tuple[str, ...]         #: what could not be read or written, one line each
    events: tuple[Event, ...] = ()    #: the user's own events, oldest first

    @property
    def kept_out(self) -> list[NodeSummary]:
        """The nodes a new job on this site keeps out (``#SBATCH --exclude``)."""
        return [n for n in self.nodes if n.kept_out]

    def drain_commands(self) -> list[str]:
        """What an admin would run to drain the kept-out nodes (clusterkit never runs them)."""
        return [n.drain_command(self.keys.window_days) for n in self.kept_out]

    def html(self) -> str:
        """``clusterkit nodes --html``: one self-contained page, each node's timeline in it."""
        from clusterkit.history.html import page

        return page(self.site, self.nodes, self.events, window_days=self.keys.window_days,
                    exclude_after=self.keys.exclude_after)

    def to_dict(self) -> dict[str, Any]:
        """``clusterkit nodes --json``'s document (without ``schema_version``)."""
        return {"site": self.site, "history_file": str(self.path), "exclude_after": self.keys.exclude_after,
                "window_days": self.keys.window_days, "allow": self.keys.allow,
                "nodes": [n.to_dict(self.keys.window_days) for n in self.nodes], "warnings": list(self.warnings)}


def node_history(site: Site, *, store: RecordStore | None = None) -> NodeHistory:
    """The node history of ``site``, brought up to date from the job records first (the nodes
    their in-job preflights dropped); what before-submit preflights and ``doctor`` blamed is
    recorded when they run."""
    from clusterkit.history.book import nodes

    from .inputs import instance
    from .site import Site

    instance("site", site, Site, "a clusterkit.api.Site")
    book, summaries = nodes(site.config, store=store)
    return NodeHistory(site.name, book.path, site.config.node_history, tuple(summaries), tuple(book.warnings),
                       tuple(book.events))
