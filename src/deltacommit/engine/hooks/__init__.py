"""Post-commit hooks: checkpoints when the interval says so, then expired-log cleanup; run
after a commit is durable, their failures logged and never raised."""
