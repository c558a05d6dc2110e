"""Model pairs and where they come from: the bundled pair, the real model, their manifests and load errors."""
