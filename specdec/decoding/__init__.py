"""The decoding loops: speculative and autoregressive generation, one round at a time."""
