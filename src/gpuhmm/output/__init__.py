"""The reduce and what it writes: hit keeping, merging, HMMER's tables and reports, the summary."""
