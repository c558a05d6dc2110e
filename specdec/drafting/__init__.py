"""The drafters that propose tokens, and the features drafter's network over the target's hidden states.

Importing the package registers its drafters (`specdec.core.registry`): a drafter in a module of
its own is one more import here."""

from . import drafters as drafters  # the built-in drafters attach their classes to the registry
