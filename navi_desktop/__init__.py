"""Navi Desktop: a local-first terminal assistant that remembers its user."""

__version__ = "0.1.0"
