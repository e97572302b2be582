"""The host side of HMMER 3.4's stages after the Forward filter on the GPU (`p7_Pipeline` from
`p7_ForwardParser` on), the tail: `profile` (the striped parameters, `P7_OPROFILE`), `target`
(`ESL_SQ`), `scores` (the host's terms and thresholds), `launch` (the batches `kernels/tail/`
reads) and `readback` (its outputs as hit records)."""
