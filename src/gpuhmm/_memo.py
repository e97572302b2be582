"""Host tables derived from a model, kept with it."""


def memoized(model, key, make):
    """make(), kept with `model` (a frozen dataclass, whose instance dict this uses as
    functools.cached_property does). A worker configures each model of a search once
    (worker.models.FilterModel), so every database shard's launches reuse what is derived here."""
    kept = model.__dict__.setdefault("_memoized", {})
    if key not in kept:
        kept[key] = make()
    return kept[key]
