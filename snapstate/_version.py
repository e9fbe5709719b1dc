"""snapstate's version: the one place it is written (pyproject.toml reads it from here,
and every snapshot header records it). See CHANGELOG.md for what a version bump means
for snapshot files and stores."""

__version__ = "0.1.0"
