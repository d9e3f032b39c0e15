"""Working through a site's login node (docs/laptop.md): the Python API of :mod:`clusterkit.remote`
(submit from a laptop, the laptop's records of such jobs, a command run for one of them there)
and the login node's half (:func:`checkout`: the uploaded code made into a tree to submit)."""

from __future__ import annotations

from clusterkit.codesnap.checkout import checkout
from clusterkit.remote.flow import Relay, Submitted, forward, on_login_node, remote_ref, submit, through_login
from clusterkit.remote.records import LoginRecord, find, latest, require

__all__ = ["LoginRecord", "Relay", "Submitted", "checkout", "find", "forward", "latest", "on_login_node",
           "remote_ref", "require", "submit", "through_login"]
