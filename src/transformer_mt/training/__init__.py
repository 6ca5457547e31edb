"""Training (§5): the loop, schedule, loss, update step, precision, validation, exact resume,
checkpoints and their averaging, distributed runs, metrics and progress."""
