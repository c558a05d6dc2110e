"""The trace of a run: its rounds and positions, how it is recorded, reduced on the device, exported and read back."""
