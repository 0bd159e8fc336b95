"""skewgate: gate MLflow model promotion on training/serving skew (KFP v2 components)."""

__version__ = "0.1.0"
