"""The machine: how fast this CPU multiplies matrices (does bf16 pay?), and glibc malloc
settings for long-running CPU processes."""
