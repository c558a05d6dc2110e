"""Building the bundled model pair: its training recipe, distillation, features drafter and model cards."""
