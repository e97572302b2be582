"""The tests' oracle of the GPU tail: HMMER 3.4's stages after the Forward filter, bit for bit, in
numpy, one module per HMMER file: `pipeline` (`p7_Pipeline` from the Forward parser on),
`fwdback`, `decoding`, `domaindef`, `stotrace`, `spensemble`, `null2`, `optacc`, `trace`,
`alidisplay` and `oprofile`, on the striped parameters production reads (`gpuhmm.stages.tail.profile`). It is
checked against pyhmmer, and the kernels against it; production never imports it."""
