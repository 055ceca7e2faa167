"""One rank running its kernel graph: the executor (`executor`), the blocks it holds (`buffer_tracker`), its
blocks of the global values (`blocks`), what it measured (`timings`), and a pipelined stage's instructions
(`pipeline_exec`)."""
