"""The error of this package: :class:`~turnfsm.errors.RenderError` (defined with
the rest of the tree in :mod:`turnfsm.errors`)."""

from __future__ import annotations

from ..errors import RenderError

__all__ = ["RenderError"]
