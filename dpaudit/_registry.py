"""A named registry: the one mechanism behind models, optimizers and later attacks."""

from __future__ import annotations

from typing import Generic, TypeVar

from dpaudit._validation import DPAuditError, check_choice

Entry = TypeVar("Entry")


class Registry(Generic[Entry]):
    """Entries by name; unknown names are a one-line error listing the choices."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def add(self, name: str, entry: Entry) -> None:
        """Register ``entry`` as ``name``; a name already registered is a one-line error (a plugin's too)."""
        if name in self._entries:
            raise DPAuditError(f"{self.kind} {name!r} is already registered; choose another name")
        self._entries[name] = entry

    def get(self, name: str) -> Entry:
        check_choice(self.kind, name, self._entries)
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)
