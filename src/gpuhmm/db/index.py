"""Finding a hit's sequence in a shard by name and length: its position in the database file."""

from __future__ import annotations

import numpy as np

from .format import PackedText, pack


class FirstPositions:
    """For a shard's (name, length) pairs, the 1-based file position of the first sequence with
    that pair, found through a vectorized index: each name's 64-bit polynomial hash, with its
    length, sorted, built without holding the interpreter lock per sequence as a dictionary of
    the pairs would. Every answer is checked against the name itself, and a hash shared by two
    pairs falls back to a scan, so the index only ever speeds the answer up."""

    _PRIME = 0x100000001B3
    _LENGTH_MIX = 0x9E3779B97F4A7C15

    def __init__(self, shard):
        self._shard = shard
        self._lengths = shard.lengths
        names = shard.names
        data, offsets = (names._data, names._offsets) if isinstance(names, PackedText) else pack(list(names))
        keys = self._keys(data, offsets, self._lengths)
        order = np.lexsort((shard.source_index, keys))
        ordered = keys[order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = ordered[1:] != ordered[:-1]
        self._keys_sorted, self._first_member = ordered[first], order[first]

    @classmethod
    def _keys(cls, data, offsets, lengths):
        sizes = np.diff(offsets)
        powers = np.cumprod(np.full(int(sizes.max(initial=0)) + 1, cls._PRIME, dtype=np.uint64))
        places = np.arange(len(data), dtype=np.int64) - np.repeat(offsets[:-1], sizes)
        terms = (data.astype(np.uint64) + np.uint64(1)) * powers[places]
        keys = np.zeros(len(sizes), dtype=np.uint64)
        named = sizes > 0
        keys[named] = np.add.reduceat(terms, offsets[:-1][named]) if len(terms) else 0
        return keys ^ (lengths.astype(np.uint64) * np.uint64(cls._LENGTH_MIX))

    @classmethod
    def _key(cls, name, length):
        mask, power, key = (1 << 64) - 1, cls._PRIME, 0
        for byte in name:
            key = (key + (byte + 1) * power) & mask
            power = (power * cls._PRIME) & mask
        return key ^ ((length * cls._LENGTH_MIX) & mask)

    def find(self, name, length):
        key = np.uint64(self._key(name, length))
        at = int(np.searchsorted(self._keys_sorted, key))
        if at < len(self._keys_sorted) and self._keys_sorted[at] == key:
            member = int(self._first_member[at])
            if self._shard.names[member] == name and int(self._lengths[member]) == length:
                return int(self._shard.source_index[member]) + 1
        matches = [
            int(self._shard.source_index[member])
            for member in np.flatnonzero(self._lengths == length)
            if self._shard.names[member] == name
        ]
        if not matches:
            raise KeyError((name, length))
        return min(matches) + 1
