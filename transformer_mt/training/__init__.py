"""Training: loss, learning-rate schedule, checkpoints and the training loop."""
