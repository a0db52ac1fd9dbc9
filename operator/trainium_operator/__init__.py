"""trainium-operator: TrainiumJob -> FSx storage, Neuron precompile, gang-scheduled DDP."""

__version__ = "0.1.0"
