"""The engine that runs the models' forwards: its KV slots, static cache, CUDA graphs and measured costs."""
