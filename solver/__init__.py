"""moesplit: choose the layer cuts (and GPU order) of an MoE pipeline that minimise decode time."""

__version__ = "0.1.0"
