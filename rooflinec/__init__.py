"""rooflinec: YAML specs of models and hardware in, per-operator roofline reports out."""

__version__ = "0.1.0"
