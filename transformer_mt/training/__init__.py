"""Training: loss, learning-rate schedule, validation and the training loop."""
