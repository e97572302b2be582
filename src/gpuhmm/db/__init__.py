"""The inputs: sequence databases (FASTA, or `gpuhmm makedb` shards) and profile-HMM files."""
