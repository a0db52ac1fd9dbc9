"""The local backend (`trainium run`, `render`): same lifecycle, TorchX's local scheduler."""
