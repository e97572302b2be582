"""Data kept on the device for as long as the host object it was made from lives."""

from __future__ import annotations

import functools
import threading
import weakref


class ResidentCache:
    """Values made from owners, each made once and kept for as long as its owner lives: a
    shard's device copies go when the worker lets the shard go. Each entry has its own lock, so
    a thread waiting for its upload or layout (behind other threads' kernels) holds up only the
    threads that need the same value."""

    def __init__(self):
        self._entries = {}
        self._lock = threading.RLock()  # a weak reference may call back while it is held

    def get(self, owner, what, make):
        key = (id(owner), what)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.owner() is not owner:
                forget = functools.partial(self._forget, key)
                entry = self._entries[key] = _Resident(weakref.ref(owner, forget))
        with entry.lock:
            if entry.value is None:
                entry.value = make()
            return entry.value

    def _forget(self, key, reference):
        with self._lock:
            if key in self._entries and self._entries[key].owner is reference:
                del self._entries[key]


class _Resident:
    """One entry of the engine's resident data: its owner (a weak reference), value and lock."""

    def __init__(self, owner):
        self.owner = owner
        self.value = None
        self.lock = threading.Lock()
