"""PyTorch/XLA DDP trainer for AWS Trainium (CPU/gloo fallback). No torch import here."""
