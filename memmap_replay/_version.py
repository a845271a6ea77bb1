"""The package version (one place: the package, the command line and provenance records read it here)."""

__version__ = "0.1.0"
