"""``clusterkit logs --rank N --node NAME``: which lines of a job's logs are that rank's or that
node's.  A file whose name says whose it is (``123.r0.rank5.out``, ``123.r0.node4.out``) is kept
whole or left out; in any other file (the batch log, one log of every rank) a line is kept when
its own prefix names the rank (torchrun's ``[rank5]:``, DeepSpeed's ``[Rank 5]``) or node
(NCCL's ``node4:pid:tid``, srun's ``srun: error: node4: ...``), read as doctor reads them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clusterkit.diagnose import lines
from clusterkit.diagnose.names import name_facts


@dataclass(frozen=True)
class LogFilter:
    """The rank and/or node asked for (both: a line must be both's)."""

    rank: int | None = None
    node: str | None = None

    def file_verdict(self, path: Path) -> bool | None:
        """True: the whole file is wanted; False: none of it; None: line by line."""
        _, node, rank = name_facts(path)
        if (self.rank is not None and rank is not None and rank != self.rank) or (
                self.node is not None and node is not None and node != self.node):
            return False
        named = [(self.rank, rank), (self.node, node)]
        return True if all(want is None or got is not None for want, got in named) else None

    def keeps(self, line: str, path: Path) -> bool:
        whole = self.file_verdict(path)
        if whole is not None:
            return whole
        _, file_node, file_rank = name_facts(path)
        if self.rank is not None and file_rank is None and lines.line_rank(line)[0] != self.rank:
            return False
        return self.node is None or file_node is not None or lines.line_node(line) == self.node
