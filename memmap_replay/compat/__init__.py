"""memmap-replay-buffer 0.2.3 compatibility: its public names over this project's machinery (see docs)."""
