"""The hit model, below every stage: HMMER's serialized hit records (`records`) and the hits
hmmsearch keeps, as pyhmmer `TopHits` (`tophits`)."""
