"""What the tests share: data and goldens (`data`, `binaries`), the command line (`cli`), the
filter stages' references (`filters`) and the tail's cases and host build (`tail`, `tail_build`)."""
