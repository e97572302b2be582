"""The inputs: sequence files (FASTA, EMBL, GenBank, alignments), `gpuhmm makedb` shards, and profile-HMM files."""
