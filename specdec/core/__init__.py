"""The math of exact speculative sampling, the checks on a run's numbers, and the settings a run asks for."""
