"""clusterkit's version, in a module of its own: the package's ``__init__`` re-exports it, and
modules below the API (the plan, the command line) import it from here, never from the package
root, whose lazy names lead back up to the API."""

__version__ = "0.1.0"
