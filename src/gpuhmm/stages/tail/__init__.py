"""The host side of HMMER 3.4's stages after the Forward filter on the GPU (`p7_Pipeline` from
`p7_ForwardParser` on), the tail: `profile` (the striped parameters, `P7_OPROFILE`), `scores`
(the host's terms and thresholds), `serialized` (the names and settings the records carry),
`launch` (the batches `kernels/tail/` reads), `schedule` (its stages, launch by launch) and
`readback` (its outputs as hit records)."""
