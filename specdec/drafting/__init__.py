"""The drafters that propose tokens, and the features drafter's network over the target's hidden states."""
