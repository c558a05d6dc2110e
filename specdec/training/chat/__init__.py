"""A drafter for a real chat target: its prompt pool, its features drafter's training and its model card."""
