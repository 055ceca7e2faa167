"""A session's state on its ranks: each rank's part of a program whose state stays between calls (`resident`),
checkpoints (`checkpoint`, across hosts `checkpoint_hosts`) and live resharding (`reshard`)."""
