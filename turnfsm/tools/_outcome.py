"""What a tool call gives back: a :class:`ToolOutcome`, its value made storable.

What a tool returns is stored as JSON, and nothing is changed silently
(the rules of :mod:`turnfsm.model._json`):

- a pydantic model is dumped in JSON mode, a dataclass and other values
  pydantic can serialise (``datetime``, ``UUID``, ``Decimal``, ``Enum``,
  ``Path``, UTF-8 ``bytes``) become their JSON form, tuples become lists;
- ``int``/``float``/``bool``/``None`` dict keys become their JSON text,
  ``nan``/``inf``/``-inf`` become ``"NaN"``/``"Infinity"``/``"-Infinity"``,
  lone surrogates in text become U+FFFD; each such conversion is a note in
  :attr:`ToolOutcome.notes` (the engine keeps them in the tool message's
  ``metadata.extra["conversions"]``), naming the place by a JSON path;
- what has no visible conversion (a tuple or other non-scalar dict key, a
  set, an object with no JSON form, nesting deeper than
  :data:`~turnfsm.model.MAX_JSON_DEPTH`, more than
  :data:`~turnfsm.model.MAX_JSON_BYTES`) fails the call: ``success=False``
  with an ``"error"`` saying what and where, which the model sees.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from turnfsm import records
from turnfsm.model import MAX_JSON_DEPTH, JSONProblem, clean_json, clean_text
from turnfsm.model._json import plain_json_copy

__all__ = ["ToolOutcome"]

_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """The result of one tool call.

    ``result`` is JSON data a store can hold (see the module docstring). On
    failure it is a dict with an ``"error"`` key holding a readable message (for
    the model and for people), plus details where there are some (``"details"``
    for invalid arguments, ``"raw"`` for arguments that were not a JSON object).
    ``notes`` say what was converted to make it JSON, and where
    (``"$.temps[2]: NaN stored as the string 'NaN'"``).
    """

    success: bool
    result: Any
    notes: tuple[str, ...] = ()

    @classmethod
    def of(cls, success: bool, value: Any, what: str = "the tool") -> ToolOutcome:
        """An outcome holding ``value`` as storable JSON, converted by the rules
        of the module docstring; a value that cannot be converted gives a
        failed outcome saying what and where."""
        kind = type(value)
        if kind is str:
            text, n = clean_text(value)
            if n:
                return cls(success, text, (f"$: {n} lone surrogate(s) replaced by U+FFFD",))
            return _outcome(cls, success, value)
        if kind in _JSON_SCALARS and (kind is not float or value - value == 0):
            return _outcome(cls, success, value)
        try:
            plain, result = plain_json_copy(value)  # most often: a plain dict
            notes: list[str] = []
            if not plain:
                result, notes = clean_json(_json_data(value, "$", 0))
        except JSONProblem as exc:
            return cls(
                False,
                {"error": f"{what} returned a value that cannot be stored as JSON: {exc}"},
            )
        return _outcome(cls, success, result, tuple(notes))


class _OpenToolOutcome:
    """ToolOutcome's slots, without its frozen ``__setattr__`` (see :func:`_outcome`)."""

    __slots__ = ("notes", "result", "success")
    success: bool
    result: Any
    notes: tuple[str, ...]


_new = object.__new__


def _outcome(
    cls: type[ToolOutcome], success: bool, result: Any, notes: tuple[str, ...] = ()
) -> ToolOutcome:
    """``cls(success, result, notes)``; a :class:`ToolOutcome` itself made with
    plain slot writes, as ``storage._base.step_log`` makes its records: every
    tool call's outcome is made here, and a frozen dataclass's ``__init__``
    sets each field through ``object.__setattr__`` (``tests/test_open_records.py``
    holds the two to the same record)."""
    if cls is not ToolOutcome:  # a subclass: through its own ``__init__``
        return cls(success, result, notes)
    o = _new(_OpenToolOutcome)
    o.success = success
    o.result = result
    o.notes = notes
    # laid out as a ToolOutcome (the same slots), it becomes one
    o.__class__ = ToolOutcome  # type: ignore[assignment]
    return o  # type: ignore[return-value]


def _json_data(value: Any, path: str, depth: int) -> Any:
    """``value`` with pydantic models, dataclasses and other objects pydantic can
    serialise replaced by their JSON form; dict keys, numbers and text are left
    for :func:`~turnfsm.model.clean_json`, which converts them visibly."""
    kind = type(value)
    if kind in _JSON_SCALARS:
        return value
    if isinstance(value, list | tuple | dict):
        if depth >= MAX_JSON_DEPTH:
            raise JSONProblem(path, f"nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, dict):
            return {k: _json_data(v, f"{path}.{k}", depth + 1) for k, v in value.items()}
        return [_json_data(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, str | int | float):  # subclasses (a StrEnum, an IntEnum)
        return value
    if isinstance(value, set | frozenset):
        raise JSONProblem(path, f"a {kind.__name__} has no order in JSON; return a list")
    if isinstance(value, BaseModel):  # the model's own JSON form
        try:
            return value.model_dump(mode="json")
        except Exception as exc:
            raise JSONProblem(path, f"{kind.__name__} cannot be dumped: {exc}") from None
    if isinstance(value, records.RECORD_TYPES):  # a record of turnfsm: its own JSON form
        return _json_data(records.to_python(value), path, depth)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _json_data(fields, path, depth)
    try:
        data = to_jsonable_python(value)
    except Exception:
        raise JSONProblem(path, f"a value of type {kind.__name__} has no JSON form") from None
    if isinstance(data, list | dict):  # an iterator or a mapping pydantic walked
        return _json_data(data, path, depth)
    return data
