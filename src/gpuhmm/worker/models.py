"""The models a worker has configured, per search: for the GPU filters (shared by every task
and thread) and, for a scan, each thread's own copies of the optimized profiles."""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading

import pyhmmer.plan7

from ..db.models import shortest_first
from ..stages import fwdfilter, msvfilter, vitfilter
from ..stages.tail.profile import StripedProfile

log = logging.getLogger("gpuhmm")

#: Searches whose configured models a worker keeps (the latest few).
SEARCHES_KEPT = 2
#: Models configured ahead at a time: small enough that the first tasks wait little.
AHEAD_BATCH = 64


@dataclasses.dataclass(frozen=True)
class FilterModel:
    """One model as the GPU filters take it, configured as hmmsearch configures it."""

    msv: msvfilter.MsvModel
    viterbi: vitfilter.ViterbiProfile
    forward: fwdfilter.ForwardProfile
    striped: StripedProfile  # what the stages after the Forward filter read


class ConfiguredModels:
    """Per search (by its key), the models configured so far, by position: every shard's tasks
    share them, and with them the tables the kernels read (`_memo.memoized`)."""

    def __init__(self):
        self._filters = collections.OrderedDict()  # search key → {position: FilterModel}
        self._profiles = collections.OrderedDict()  # search key → {position: OptimizedProfile}
        self._ahead = {}  # search key → threading.Event, set once configuring ahead is done
        self._changed = threading.Condition()  # notified as models are configured

    def filter_models(self, search_key, positions, models):
        """The FilterModels of `positions` (`models` are those models, in the same order). While
        the worker configures every model ahead (`configure_ahead`), a task waits for its own
        models only, so the GPU starts on the first groups while the rest follow."""
        ahead = self._ahead.get(search_key)
        if ahead is not None:
            with self._changed:
                self._changed.wait_for(
                    lambda: ahead.is_set() or all(p in self._filters.get(search_key, ()) for p in positions)
                )
        return self._configure(search_key, positions, models)

    def _configure(self, search_key, positions, models):
        with self._changed:
            known = _latest(self._filters, search_key, forget=lambda key: self._ahead.pop(key, None))
            missing = [index for index, position in enumerate(positions) if position not in known]
        if missing:
            hmms = [models[index] for index in missing]
            background = pyhmmer.plan7.Background(hmms[0].alphabet)
            written = vitfilter.configured(hmms, background)
            msv_models = msvfilter.msv_models(hmms, [optimized for optimized, _ in written])
            profiles = vitfilter.viterbi_profiles(hmms, background, written)
            forward = [fwdfilter.ForwardProfile.from_h3p(data, hmm) for hmm, (_, data) in zip(hmms, written)]
            striped = [
                StripedProfile.from_configured(*configured, nodes) for configured, nodes in zip(written, forward)
            ]
            with self._changed:
                for index, *parts in zip(missing, msv_models, profiles, forward, striped):
                    known.setdefault(positions[index], FilterModel(*parts))
                self._changed.notify_all()
        return [known[position] for position in positions]

    def configure_ahead(self, models, lengths):
        """Configure every model of `models` (a `ModelsOnDisk`), shortest first, in a background
        thread: every worker needs every model, and this is work each worker otherwise did in its
        tasks, holding its interpreter lock, whatever share of the database it has."""
        with self._changed:
            if models.key in self._ahead:
                return
            done = self._ahead[models.key] = threading.Event()

        def configure():
            try:
                hmms = models.load()
                order = shortest_first(lengths)
                for start in range(0, len(order), AHEAD_BATCH):
                    batch = order[start : start + AHEAD_BATCH]
                    self._configure(models.key, batch, [hmms[position] for position in batch])
            except Exception as error:  # tasks configure what is missing, and raise its error in full
                log.debug("configuring models ahead failed: %s", error)
            finally:
                with self._changed:
                    done.set()
                    self._changed.notify_all()

        threading.Thread(target=configure, name="gpuhmm-model-configure", daemon=True).start()

    def scan_profiles(self, search_key, models, copies):
        """profile(m): a copy, in `copies` (a thread's own dict), of model m's OptimizedProfile
        (`msvfilter.configured_profile`, as hmmscan reads it from a pressed file). A scan
        reconfigures each profile for the length of the sequence at hand, so threads cannot share
        one (hmmscan's threads each read their own); the worker configures each model once, and
        each thread copies it."""
        with self._changed:
            configured = _latest(self._profiles, search_key)
        if search_key not in copies:
            copies.clear()
            copies[search_key] = {}
        mine = copies[search_key]
        background = pyhmmer.plan7.Background(models[0].alphabet)

        def profile(position):
            if position not in mine:
                if position not in configured:
                    configured.setdefault(position, msvfilter.configured_profile(models[position], background))
                mine[position] = configured[position].copy()
            return mine[position]

        return profile


def _latest(searches, key, forget=None):
    """The entry of search `key` in `searches` (created if new), keeping the latest SEARCHES_KEPT."""
    if key not in searches:
        searches[key] = {}
        while len(searches) > SEARCHES_KEPT:
            dropped, _ = searches.popitem(last=False)
            if forget is not None:
                forget(dropped)
    return searches[key]
